"""Launch-configuration tuning of the Triton kernels on a CUDA GPU (scripts/gpu_kernels.py).

`tune_forward` and `tune_backward` time candidate launch configurations of one kernel variant
(`triton.testing.do_bench` medians) and return them fastest first; the winners go to
kernels/tuned/<arch>.json so that runs never tune. Speed against other attention
implementations is measured by `flashprobe bench` (flashprobe.probes.benchmark).
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

import torch

from flashprobe.kernels import launch, tuning
from flashprobe.spec import KernelSpec

Config = tuning.FwdConfig | tuning.BwdConfig


#: A config tuned at another sequence length replaces the one tuned at tuning.TUNED_SEQ only
#: when it is at least this much faster there (single do_bench timings of one config differ
#: by 1–2% from call to call).
SEQ_MARGIN = 0.02


def pick(timings: list[tuple[Config, float]], incumbent: Config | None) -> Config:
    """The fastest of `timings` (fastest first), unless `incumbent` is within SEQ_MARGIN."""
    best, best_ms = timings[0]
    incumbent_ms = dict(timings).get(incumbent, math.inf)  # inf: None, or never timed
    return best if best_ms < (1 - SEQ_MARGIN) * incumbent_ms else incumbent


def fwd_candidates(head_dim: int, tma: bool = False) -> list[tuning.FwdConfig]:
    """Forward launch configs to time; with `tma` (a GPU with the TMA copy engine) each also
    with K and V loaded through tensor descriptors."""
    out = []
    for block_m in (64, 128):
        for num_warps in (4, 8):
            for num_stages in (2, 3, 4):
                if block_m == 64 and num_warps == 8:
                    continue
                out.append(tuning.FwdConfig(block_m, 64, num_warps, num_stages))
    if head_dim <= 64:
        # 128 registers let two 8-warp blocks share an SM; ptxas alone took 133 for the
        # instrumented forward at d 64 (one block per SM, 15–20% slower:
        # docs/kernel-performance.md).
        out += [tuning.FwdConfig(128, 64, 8, s, max_registers=128) for s in (2, 3, 4)]
    return with_tma(out) if tma else out


def with_tma(configs: list[Config]) -> list[Config]:
    """`configs`, then each again with tensor-descriptor loads (`tma`)."""
    return [*configs, *(replace(c, tma=True) for c in configs)]


def bwd_candidates(
    head_dim: int, atomic_dq: bool = False, tma: bool = False
) -> list[tuning.BwdConfig]:
    """Backward launch configs to time (`tma` as in `fwd_candidates`)."""
    if atomic_dq:
        return with_tma(atomic_dq_candidates(head_dim)) if tma else atomic_dq_candidates(head_dim)
    blocks = [(32, 128, 128, 32), (64, 128, 128, 64), (32, 64, 64, 32), (64, 64, 64, 64)]
    out = []
    for bm1, bn1, bm2, bn2 in blocks:
        for num_warps in (4, 8):
            for num_stages in (2, 3):
                if bn1 == 64 and num_warps == 8:
                    continue
                out.append(tuning.BwdConfig(bm1, bn1, bm2, bn2, num_warps, num_stages))
    return with_tma(out) if tma else out


def atomic_dq_candidates(head_dim: int) -> list[tuning.BwdConfig]:
    """(block_m1, block_n1) tiles of the atomic-dQ backward at 2 and 3 stages (block_m2,
    block_n2, unused, repeat them): the heuristic's (tuning.atomic_dq_heuristic, no spills on
    sm_90), smaller ones, and FlashAttention-2's larger ones, which spill in Triton (64×128 at
    d 128, 128×128 at d 64) but may still win, as the ordered backward's tuned d 128 causal
    config does."""
    if head_dim <= 64:
        tiles = [(64, 128, 8), (128, 128, 8), (32, 128, 8), (64, 64, 4), (32, 64, 4)]
    else:
        tiles = [(32, 128, 8), (64, 128, 8), (16, 128, 8), (32, 64, 8), (64, 64, 8)]
    return [tuning.BwdConfig(m, n, m, n, warps, stages)
            for m, n, warps in tiles for stages in (2, 3)]  # fmt: skip


def forward_fn(
    causal: bool,
    spec: KernelSpec,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    instrument: bool = False,
    config: tuning.FwdConfig | None = None,
) -> Callable[[], object]:
    scale = 1.0 / math.sqrt(q.shape[-1])
    return lambda: launch.attention_forward(
        q, k, v, causal=causal, spec=spec, scale=scale, instrument=instrument,
        keep_o_fp32=spec.delta_source == "o_fp32", config=config,
    )  # fmt: skip


def backward_fn(
    causal: bool,
    spec: KernelSpec,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    *,
    config: tuning.BwdConfig | None = None,
    dq_accumulation: launch.DqAccumulation = "ordered",
) -> Callable[[], object]:
    """The backward alone (δ preprocess + dK/dV/dQ kernel) on saved forward outputs."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    fwd = launch.attention_forward(q, k, v, causal=causal, spec=spec, scale=scale,
                                   keep_o_fp32=spec.delta_source == "o_fp32")  # fmt: skip
    return lambda: launch.attention_backward(
        q, k, v, fwd.o, fwd.lse, do, causal=causal, spec=spec, scale=scale,
        o_fp32=fwd.o_fp32, config=config, dq_accumulation=dq_accumulation,
    )  # fmt: skip


def time_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def tune_forward(
    inputs: tuple[torch.Tensor, ...],
    causal: bool,
    spec: KernelSpec,
    candidates: Iterable[tuning.FwdConfig],
    *,
    instrument: bool = False,
) -> list[tuple[tuning.FwdConfig, float]]:
    """(config, ms) per candidate, fastest first; a candidate that fails to launch gets inf."""
    q, k, v, _ = inputs
    return _fastest_first(
        candidates,
        lambda c: forward_fn(causal, spec, q, k, v, instrument=instrument, config=c),
    )


def tune_backward(
    inputs: tuple[torch.Tensor, ...],
    causal: bool,
    spec: KernelSpec,
    candidates: Iterable[tuning.BwdConfig],
    dq_accumulation: launch.DqAccumulation = "ordered",
) -> list[tuple[tuning.BwdConfig, float]]:
    q, k, v, do = inputs
    return _fastest_first(
        candidates,
        lambda c: backward_fn(causal, spec, q, k, v, do, config=c, dq_accumulation=dq_accumulation),
    )


def _fastest_first(candidates: Iterable, make_fn: Callable) -> list:
    timings = []
    for config in candidates:
        try:
            timings.append((config, time_ms(make_fn(config))))
        except Exception as exc:
            print(f"  skip {config}: {str(exc).splitlines()[0][:100]}")
            timings.append((config, math.inf))
    return sorted(timings, key=lambda item: item[1])


def compile_in_parallel(task_fn: Callable[[tuple], str], tasks: list[tuple], workers: int) -> None:
    """Run `task_fn` (a module-level function that runs one kernel variant once and returns
    "ok" or a failure line) over `tasks` in spawned worker processes, printing failures.

    Triton compiles each variant in its worker and keeps it in its disk cache, so a timing
    process afterwards measures kernels instead of compiles (serially, one compile is seconds).
    """
    start = time.time()
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        results = list(pool.map(task_fn, tasks))
    failed = [r for r in results if r != "ok"]
    print(f"precompiled {len(tasks)} variants in {time.time() - start:.0f}s; {len(failed)} failed")
    for line in failed[:10]:
        print("  " + line)
