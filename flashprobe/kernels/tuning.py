"""Launch configurations: tuned ones kept in kernels/tuned/*.json, heuristics otherwise.

The forward's query tile and the backward's block sizes only change the order of fp32
additions, so they are free performance choices. The forward's key tile is the spec's
`block_n` (a numerics choice); wider logical tiles run as `sub_n`-wide physical sub-tiles.

Tuned files are keyed by GPU architecture (`sm90.json`: Hopper), then by
`fwd|d{head_dim}|{causal|full}|bn{block_n}|{dtype}|{variant}` and
`bwd|d{head_dim}|{causal|full}|{dtype}|{variant}`, tuned at N = TUNED_SEQ; the same key with
`|n{N}` appended holds the config tuned at another sequence length N, and a launch takes the
entry tuned nearest its own length (short causal sequences want smaller query tiles: more
blocks for the GPU's SMs). A missing entry falls back to the heuristics below; nothing is
tuned at run time (see `flashprobe.kernels.autotune`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

TUNED_DIR = Path(__file__).parent / "tuned"
#: The sequence length of the tuned entries without an `|n{N}` suffix.
TUNED_SEQ = 4096
#: Widest key tile run in one pass; wider logical tiles are split into sub-tiles.
MAX_ONE_PASS_N = 128


@dataclass(frozen=True)
class FwdConfig:
    block_m: int
    sub_n: int  # physical key sub-tile of the two-pass path (ignored when one pass)
    num_warps: int
    num_stages: int
    #: Widest logical key tile run in one pass; wider ones are split into sub_n sub-tiles.
    max_one_pass: int = MAX_ONE_PASS_N
    #: Register cap per thread (Triton's `maxnreg`), or None for ptxas's choice. A cap that
    #: does not spill can let one more block share an SM (65536 registers).
    max_registers: int | None = None
    #: K and V loaded through device-side tensor descriptors (Hopper's TMA copy engine) instead
    #: of pointers: the same values, a performance choice (GPUs of compute capability ≥ 9 and
    #: 16-byte-aligned rows; the launcher falls back to pointers otherwise).
    tma: bool = False


@dataclass(frozen=True)
class BwdConfig:
    block_m1: int
    block_n1: int
    block_m2: int
    block_n2: int
    num_warps: int
    num_stages: int
    #: The inner loops' Q, dO, K and V tiles through tensor descriptors (TMA), as FwdConfig.tma.
    tma: bool = False


#: Small tiles for the CPU interpreter: its cost grows with tile area, not with launches.
INTERPRETER_FWD = FwdConfig(block_m=16, sub_n=32, num_warps=4, num_stages=1, max_one_pass=64)
INTERPRETER_BWD = BwdConfig(16, 32, 32, 16, num_warps=4, num_stages=1)


def arch_name(device: torch.device) -> str:
    return _arch_name(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache  # asked on every launch; torch's query takes ~25 µs
def _arch_name(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm{major}{minor}"


def dtype_name(dtype: torch.dtype) -> str:
    return "fp16" if dtype == torch.float16 else "bf16"


def fwd_variant(
    two_pass: bool, fp32_p: bool, acc_low: bool, stabilized: bool = False, stats: bool = False
) -> str:
    """Kernel variants whose register needs or per-score work differ enough to want their own
    configs: the stabilized softmax's tie test and instrumentation add ALU work per score."""
    parts = ["twopass" if two_pass else "onepass"]
    if fp32_p:
        parts.append("p32")
    if acc_low:
        parts.append("acc16")
    if stabilized:
        parts.append("stab")
    if stats:
        parts.append("stats")
    return "-".join(parts)


def bwd_variant(fp32_dots: bool, atomic_dq: bool = False) -> str:
    """fp32 P̄ or dS operands (three tensor-core dots each), and dQ summed with atomics (its
    key-block loop carries a fifth product and the adds: other block sizes suit it)."""
    return ("dot32" if fp32_dots else "dot16") + ("-atomic" if atomic_dq else "")


def fwd_key(head_dim: int, causal: bool, block_n: int | None, dtype: str, variant: str) -> str:
    mask = "causal" if causal else "full"
    bn = "full" if block_n is None else str(block_n)
    return f"fwd|d{head_dim}|{mask}|bn{bn}|{dtype}|{variant}"


def bwd_key(head_dim: int, causal: bool, dtype: str, variant: str) -> str:
    mask = "causal" if causal else "full"
    return f"bwd|d{head_dim}|{mask}|{dtype}|{variant}"


def seq_key(key: str, seq: int) -> str:
    """The key of the entry tuned at sequence length `seq`."""
    return key if seq == TUNED_SEQ else f"{key}|n{seq}"


def tuned_entry(arch: str, key: str, seq: int) -> dict[str, int] | None:
    """The entry for `key` tuned at the sequence length nearest `seq` (in log2; the shorter on
    a tie), or None when `key` was not tuned at any length."""
    lengths = tuned_lengths(arch).get(key)
    if not lengths:
        return None
    nearest = min(lengths, key=lambda n: (abs(math.log2(max(seq, 1) / n)), n))
    return lengths[nearest]


@functools.cache
def load_tuned(arch: str) -> dict[str, dict[str, int]]:
    path = TUNED_DIR / f"{arch}.json"
    if not path.is_file():
        return {}
    return json.loads(path.read_text())


@functools.cache
def tuned_lengths(arch: str) -> dict[str, dict[int, dict[str, int]]]:
    """`load_tuned(arch)` indexed by key without its `|n{N}` suffix, then by N (launches look
    entries up by length on every call)."""
    index: dict[str, dict[int, dict[str, int]]] = {}
    for key, entry in load_tuned(arch).items():
        base, _, last = key.rpartition("|")
        if last[:1] == "n" and last[1:].isdigit():
            index.setdefault(base, {})[int(last[1:])] = entry
        else:
            index.setdefault(key, {})[TUNED_SEQ] = entry
    return index


def clear_cache() -> None:
    """Forget the tuned files read so far (after writing or swapping them)."""
    for cached in (load_tuned, tuned_lengths, forward_config, backward_config):
        cached.cache_clear()


@functools.lru_cache(maxsize=4096)  # looked up on every launch
def forward_config(
    arch: str,
    head_dim: int,
    causal: bool,
    block_n: int | None,
    dtype: str,
    variant: str,
    seq: int = TUNED_SEQ,
) -> FwdConfig:
    entry = tuned_entry(arch, fwd_key(head_dim, causal, block_n, dtype, variant), seq)
    if entry is None:  # a stabilized or instrumented variant not tuned on its own: its base's
        base = "-".join(p for p in variant.split("-") if p not in ("stab", "stats"))
        entry = tuned_entry(arch, fwd_key(head_dim, causal, block_n, dtype, base), seq)
    if entry is not None:
        return FwdConfig(**entry)
    two_pass = variant.startswith("twopass")
    heavy = two_pass or "p32" in variant or "acc16" in variant
    if heavy or head_dim > 128:
        # At d 256 a 128-key one-pass tile fits an H200's 227 KB of shared memory with one K/V
        # stage only (96 KB; 288 KB with two). tests/kernels/test_tuning.py compiles and checks.
        wide = head_dim > 128 and not two_pass and block_n is not None and block_n > 64
        return FwdConfig(block_m=64, sub_n=64, num_warps=4, num_stages=1 if wide else 2)
    # 8 warps: with 4, a 128×128 score tile (128-key one-pass tiles) spills registers in the
    # key-tile loop even at d 64 (tests/kernels/test_tuning.py compiles these for sm_90).
    if head_dim <= 64:
        return FwdConfig(block_m=128, sub_n=64, num_warps=8, num_stages=4)
    return FwdConfig(block_m=128, sub_n=64, num_warps=8, num_stages=3)


@functools.lru_cache(maxsize=4096)
def backward_config(
    arch: str, head_dim: int, causal: bool, dtype: str, variant: str, seq: int = TUNED_SEQ
) -> BwdConfig:
    entry = tuned_entry(arch, bwd_key(head_dim, causal, dtype, variant), seq)
    if entry is not None:
        return BwdConfig(**entry)
    if variant.endswith("-atomic"):
        return atomic_dq_heuristic(head_dim, variant.startswith("dot32"))
    if head_dim > 128:
        if variant == "dot32":
            return BwdConfig(16, 64, 64, 16, num_warps=4, num_stages=1)
        return BwdConfig(32, 64, 64, 32, num_warps=8, num_stages=1)
    if variant == "dot32":
        return BwdConfig(32, 64, 64, 32, num_warps=4, num_stages=2)
    return BwdConfig(32, 128, 128, 32, num_warps=4, num_stages=3 if head_dim > 64 else 5)


def atomic_dq_heuristic(head_dim: int, fp32_dots: bool) -> BwdConfig:
    """The atomic-dQ backward untuned: one program per key block of block_n1 keys, looping over
    block_m1 query rows (block_m2, block_n2 are unused: set to block_m1, block_n1).

    Each iteration holds a fifth tile, the [block_m1, head_dim] fp32 dS·K, beside the dK and dV
    accumulators, so the tiles are FlashAttention-2's (128-key blocks) only where that fits in
    255 registers: the largest that compile for sm_90 without spilling (Triton 3.9,
    tests/kernels/test_tuning.py). 64×128 already spills at d 128, so there the query tile is
    32 rows; fp32 dS operands (three dots each) need narrower tiles still.
    """
    if head_dim <= 64:
        if fp32_dots:
            return BwdConfig(32, 64, 32, 64, num_warps=4, num_stages=2)
        return BwdConfig(64, 128, 64, 128, num_warps=8, num_stages=3)
    if head_dim <= 128:
        if fp32_dots:
            return BwdConfig(16, 64, 16, 64, num_warps=4, num_stages=1)
        return BwdConfig(32, 128, 32, 128, num_warps=8, num_stages=2)
    if fp32_dots:
        return BwdConfig(16, 32, 16, 32, num_warps=8, num_stages=1)
    return BwdConfig(32, 32, 32, 32, num_warps=8, num_stages=1)


def smaller_configs(config: FwdConfig | BwdConfig) -> list[FwdConfig | BwdConfig]:
    """Configs to try, in order, when `config` needs more shared memory than the GPU has.

    First fewer K/V pipeline stages (same tiles); then, for a forward whose one-pass key tile
    is wider than its sub-tile, the two-pass path over sub-tiles (the same logical tile: only
    the fp32 summation order changes).
    """
    fewer = [replace(config, num_stages=s) for s in range(config.num_stages - 1, 0, -1)]
    if isinstance(config, FwdConfig) and config.max_one_pass > config.sub_n:
        split = replace(config, max_one_pass=config.sub_n)
        fewer += [replace(split, num_stages=s) for s in range(min(config.num_stages, 2), 0, -1)]
    return fewer


def config_dict(config: FwdConfig | BwdConfig) -> dict[str, int]:
    """The config's fields as kernels/tuned/*.json stores them (unset optional ones and a
    False `tma` left out, so the files tuned before it read the same)."""
    return {
        name: value
        for name, value in asdict(config).items()
        if value is not None and not (name == "tma" and value is False)
    }
