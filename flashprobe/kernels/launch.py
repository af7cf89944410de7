"""`triton_attention`: the autograd.Function around the Triton kernels, and their launches.

The KernelSpec switches become the kernels' `tl.constexpr` arguments (one compiled variant per
combination in use, never a copied kernel). Launch sizes come from `flashprobe.kernels.tuning`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch

from flashprobe.errors import FlashprobeError
from flashprobe.kernels import tuning
from flashprobe.kernels.backward import (
    DELTA_DP_P,
    DELTA_O_FP32,
    DELTA_O_LOWP,
    DELTA_O_RECOMPUTE,
    SUM_P_ERROR,
    attn_bwd_kernel,
    attn_bwd_preprocess_kernel,
)
from flashprobe.kernels.common import (
    LOG2E,
    SOFTMAX_FUSED_SCALE,
    SOFTMAX_STABILIZED,
    SOFTMAX_STANDARD,
)
from flashprobe.kernels.fastlaunch import Launcher
from flashprobe.kernels.forward import attn_fwd_kernel
from flashprobe.numerics.rounding import low_dtype_for
from flashprobe.reference.emulator import rounded_row_sum_floor
from flashprobe.reference.heads import sum_groups
from flashprobe.spec import KernelSpec
from flashprobe.stats import AttentionStats

_SOFTMAX = {
    "standard": SOFTMAX_STANDARD,
    "stabilized": SOFTMAX_STABILIZED,
    "fused_scale": SOFTMAX_FUSED_SCALE,
}
_DELTA = {
    "o_lowp": DELTA_O_LOWP,
    "o_fp32": DELTA_O_FP32,
    "o_recompute": DELTA_O_RECOMPUTE,
    "dp_p": DELTA_DP_P,
}
# The compiler must not contract `x*c - m` into one FMA: "standard" subtracts the rounded
# product exactly (the max entry's P̄ is then exactly 1), and only "fused_scale" asks for the FMA
# (written as tl.fma). Every other multiply-add of docs/semantics.md also rounds twice.
_NO_FP_FUSION = {"enable_fp_fusion": False}
PREPROCESS_BLOCK_M = 64
PREPROCESS_BLOCK_N = 64
_FORWARD = Launcher(attn_fwd_kernel)
_PREPROCESS = Launcher(attn_bwd_preprocess_kernel)
_BACKWARD = Launcher(attn_bwd_kernel)

#: How the backward sums dQ (a launch option, not a KernelSpec switch: the rounding points are
#: the same). "ordered": each query block's program loops over the key blocks, deterministic.
#: "atomic": the key blocks add their dS·K into an fp32 buffer with atomics, 5 matrix products
#: per block pair instead of 7; the order of those fp32 additions changes from run to run, so
#: dQ's last bits may too (docs/semantics.md, backward). Training and replay use "ordered".
DqAccumulation = Literal["ordered", "atomic"]
DQ_ACCUMULATIONS: tuple[str, ...] = get_args(DqAccumulation)


def interpreting() -> bool:
    """True when the kernels were built by Triton's interpreter (TRITON_INTERPRET=1 at import)."""
    return type(attn_fwd_kernel).__name__ == "InterpretedFunction"


@dataclass
class ForwardOutputs:
    o: torch.Tensor
    lse: torch.Tensor  # [B, H, M] fp32, natural log
    o_fp32: torch.Tensor | None
    stats: AttentionStats | None


# -- launches ---------------------------------------------------------------------------------
def attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    spec: KernelSpec,
    scale: float,
    instrument: bool = False,
    keep_o_fp32: bool = False,
    config: tuning.FwdConfig | None = None,
) -> ForwardOutputs:
    """Launch the forward kernel (no autograd). Inputs' last dimension must be contiguous."""
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    device = q.device
    o = torch.empty((batch, heads, seq_q, head_dim), device=device, dtype=q.dtype)
    o32 = torch.empty(o.shape, device=device, dtype=torch.float32) if keep_o_fp32 else o
    lse = torch.empty((batch, heads, seq_q), device=device, dtype=torch.float32)
    if instrument:
        row_max = torch.empty_like(lse)
        tie_events = torch.empty(lse.shape, device=device, dtype=torch.int32)
        p_ones = torch.empty_like(tie_events)
    else:  # never written: the kernel's INSTRUMENT branch is compiled out
        row_max, tie_events, p_ones = lse, lse, lse

    # The logical key tile: spec.block_n, or the whole sequence when untiled.
    logical_n = seq_k if spec.block_n is None else spec.block_n
    one_pass_n = max(16, _next_power_of_2(logical_n))
    if config is None:
        two_pass = one_pass_n > tuning.MAX_ONE_PASS_N
        config = _forward_config(q, max(seq_q, seq_k), head_dim, causal, spec, two_pass,
                                 instrument)  # fmt: skip

    def launch(config: tuning.FwdConfig) -> None:
        two_pass = one_pass_n > config.max_one_pass
        block_n = config.sub_n if two_pass else one_pass_n
        block_m = config.block_m
        if spec.block_m is not None and spec.block_m <= 128 and not interpreting():
            block_m = spec.block_m  # honoured where it fits in registers; numerically inert
        grid = (_cdiv(seq_q, block_m), batch * heads, 1)
        _FORWARD(
            grid,
            (q, k, v, o, o32, lse, row_max, tie_events, p_ones),
            (*_row_strides(q, k, v, o), heads, heads // k.shape[1], seq_q, seq_k,
             max(logical_n, 1),
             scale, scale * LOG2E, spec.tie_tolerance * LOG2E, spec.beta),
            dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, TWO_PASS=two_pass,
                 CAUSAL=causal, **forward_switches(spec, instrument=instrument,
                                                   keep_o_fp32=keep_o_fp32, dtype=q.dtype),
                 TMA=config.tma and tma_loads_fit(k, v), INTERPRET=interpreting()),
            _options(config.num_warps, config.num_stages, config.max_registers),
        )  # fmt: skip

    key = ("fwd", q.device, q.dtype, head_dim, causal, spec, instrument, keep_o_fp32, one_pass_n)
    _launch_fitting(launch, config, key)
    stats = None
    if instrument:
        stats = AttentionStats(lse=lse, row_max=row_max, tie_events=tie_events, p_bar_ones=p_ones)
    return ForwardOutputs(o=o, lse=lse, o_fp32=o32 if keep_o_fp32 else None, stats=stats)


def forward_switches(
    spec: KernelSpec, *, instrument: bool, keep_o_fp32: bool, dtype: torch.dtype = torch.bfloat16
) -> dict[str, Any]:
    """The forward kernel's numerics constexprs for `spec` and inputs of `dtype`
    (docs/semantics.md), by name."""
    return {
        "SCORE_LOW": spec.score_precision == "bf16",
        "SOFTMAX": _SOFTMAX[spec.softmax],
        "P_LOW": spec.p_bar_precision == "bf16",
        "ACC_LOW": spec.accumulator == "bf16",
        "L_LOW": spec.l_precision == "bf16",
        "L_FROM_ROUNDED": spec.l_from_rounded_p,
        # the floor as the input dtype holds it; 0.0 (no floor, or one fp16 flushes) is off
        "ROW_SUM_FLOOR": rounded_row_sum_floor(spec, low_dtype_for(dtype)) or 0.0,
        "RELEASE_MASKED": spec.masked_tiles == "release",
        "ROW_SUM_BIAS": spec.row_sum_bias,
        "STORE_O32": keep_o_fp32,
        "INSTRUMENT": instrument,
    }


def attention_delta(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    *,
    causal: bool,
    spec: KernelSpec,
    scale: float,
    o_fp32: torch.Tensor | None = None,
) -> torch.Tensor:
    """δ per query row ([B, H, M] fp32) by spec.delta_source and spec.delta_precision.

    o, o_fp32 and do must be contiguous (they share strides in the kernel).
    """
    source = _DELTA[spec.delta_source]
    if source == DELTA_O_FP32 and o_fp32 is None:
        raise FlashprobeError("delta_source 'o_fp32' needs the forward's fp32 O")
    return _preprocess(q, k, v, o, o_fp32 if o_fp32 is not None else o, do, lse, source=source,
                       causal=causal, spec=spec, scale=scale,
                       low=spec.delta_precision == "bf16")  # fmt: skip


def softmax_sum_error(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, *, causal: bool, spec: KernelSpec,
    scale: float,
) -> torch.Tensor:  # fmt: skip
    """ΣP − 1 per query row ([B, H, M] fp32) of the P that the backward recomputes from the
    forward's `lse` (the emulator's `softmax_sum_error_qk`, every row): one preprocess launch
    instead of the ~30 small torch ops of the emulator's version."""
    q, k = last_dim_contiguous(q), last_dim_contiguous(k)
    # Out, O32, DO and V are never read for this source; q stands in for them.
    return _preprocess(q, k, k, q, q, q, lse, source=SUM_P_ERROR, causal=causal, spec=spec,
                       scale=scale, low=False)  # fmt: skip


def _preprocess(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, o32: torch.Tensor,
    do: torch.Tensor, lse: torch.Tensor, *, source: int, causal: bool, spec: KernelSpec,
    scale: float, low: bool,
) -> torch.Tensor:  # fmt: skip
    """One launch of the preprocess kernel: a value per query row, [B, H, M] fp32."""
    batch, heads, seq_q, head_dim = q.shape
    out = torch.empty((batch, heads, seq_q), device=q.device, dtype=torch.float32)
    block_m = 16 if interpreting() else PREPROCESS_BLOCK_M
    block_n = 32 if interpreting() else PREPROCESS_BLOCK_N
    _PREPROCESS(
        (_cdiv(seq_q, block_m), batch * heads, 1),
        (o, o32, do, out, q, k, v, lse),
        (*_row_strides(q, k, v, o), heads, heads // k.shape[1], seq_q, k.shape[2], scale,
         scale * LOG2E),
        dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, SOURCE=source, CAUSAL=causal,
             SCORE_LOW=spec.score_precision == "bf16", FUSED=spec.softmax == "fused_scale",
             DELTA_LOW=low, INTERPRET=interpreting()),
        _options(4, 2 if source >= DELTA_O_RECOMPUTE else 1),
    )  # fmt: skip
    return out


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    *,
    causal: bool,
    spec: KernelSpec,
    scale: float,
    o_fp32: torch.Tensor | None = None,
    config: tuning.BwdConfig | None = None,
    dq_accumulation: DqAccumulation = "ordered",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """δ preprocess, then dQ, dK, dV (input dtype, contiguous); dQ summed as `dq_accumulation`
    says (`DqAccumulation`)."""
    atomic = check_dq_accumulation(dq_accumulation) == "atomic"
    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    do = do.contiguous()
    delta = attention_delta(q, k, v, o, lse, do, causal=causal, spec=spec, scale=scale,
                            o_fp32=o_fp32)  # fmt: skip
    group = heads // kv_heads
    dq = torch.empty((batch, heads, seq_q, head_dim), device=q.device, dtype=q.dtype)
    # atomic: the kernel adds unscaled fp32 partial sums here; scaled and rounded below.
    dq_sum = torch.zeros(dq.shape, device=q.device, dtype=torch.float32) if atomic else dq
    # Grouped-query attention: every query head's dK, dV unrounded (fp32), summed per shared
    # head below and rounded once; otherwise the kernel rounds them itself.
    dkv_dtype = q.dtype if group == 1 else torch.float32
    dk = torch.empty((batch, heads, seq_k, head_dim), device=q.device, dtype=dkv_dtype)
    dv = torch.empty_like(dk)
    fp32_dots = spec.p_bar_precision == "fp32" or spec.ds_precision == "fp32"
    if config is None:
        config = _backward_config(q, max(seq_q, seq_k), head_dim, causal, fp32_dots, atomic)

    def launch(config: tuning.BwdConfig) -> None:
        blocks = _cdiv(seq_k, config.block_n1)
        if not atomic:  # the same programs also compute dQ of the query blocks
            blocks = max(blocks, _cdiv(seq_q, config.block_m2))
        _BACKWARD(
            (blocks, batch * heads, 1),
            (q, k, v, do, dq_sum, dk, dv, lse, delta),
            (*_row_strides(q, k, v, do, dq_sum, dk), heads, group, seq_q, seq_k, scale,
             scale * LOG2E),
            dict(HEAD_DIM=head_dim,
                 BLOCK_M1=config.block_m1, BLOCK_N1=config.block_n1,
                 BLOCK_M2=config.block_m2, BLOCK_N2=config.block_n2,
                 CAUSAL=causal, **backward_switches(spec),
                 ATOMIC_DQ=atomic, KEY_MASK=atomic and seq_k % config.block_n1 != 0,
                 TMA=config.tma and tma_loads_fit(q, k, v, do), INTERPRET=interpreting()),
            _options(config.num_warps, config.num_stages),
        )  # fmt: skip

    key = ("bwd", q.device, q.dtype, head_dim, causal, spec, dq_accumulation)
    _launch_fitting(launch, config, key)
    if atomic:  # the ordered dQ loop's last step, to_low(dq · scale): an fp32 product, RNE cast
        dq.copy_(dq_sum.mul_(scale))
    if group > 1:
        dk, dv = (sum_groups(t, group).to(q.dtype) for t in (dk, dv))
    return dq, dk, dv


def backward_switches(spec: KernelSpec) -> dict[str, bool]:
    """The backward kernel's numerics constexprs for `spec` (docs/semantics.md), by name."""
    return {
        "SCORE_LOW": spec.score_precision == "bf16",
        "FUSED": spec.softmax == "fused_scale",
        "P_LOW": spec.p_bar_precision == "bf16",
        "DS_LOW": spec.ds_precision == "bf16",
    }


def check_dq_accumulation(dq_accumulation: str) -> str:
    """`dq_accumulation` if it is one of DQ_ACCUMULATIONS, else a FlashprobeError."""
    if dq_accumulation not in DQ_ACCUMULATIONS:
        choices = ", ".join(DQ_ACCUMULATIONS)
        raise FlashprobeError(f"dq_accumulation must be one of {choices}, got {dq_accumulation!r}")
    return dq_accumulation


# -- helpers ----------------------------------------------------------------------------------
def tma_loads_fit(*tensors: torch.Tensor) -> bool:
    """Whether `tensors` can be read through tensor descriptors: a GPU with the TMA
    copy engine (compute capability ≥ 9; or the interpreter, which emulates it) and every row of
    every head starting 16-byte aligned, as a descriptor needs. Sets Triton's scratch allocator
    for the descriptors if the caller has not set one."""
    if not interpreting() and int(tuning.arch_name(tensors[0].device)[2:]) < 90:
        return False
    for t in tensors:
        size = t.element_size()
        if t.data_ptr() % 16 or any(stride * size % 16 for stride in t.stride()[:3]):
            return False
        if t.shape[-1] * size < 16:
            return False
    _ensure_scratch_allocator()
    return True


def _ensure_scratch_allocator() -> None:
    """Device-side tensor descriptors live in global scratch memory, which Triton asks the
    allocator set with `triton.set_allocator` for (per thread: a context variable). Keep the
    caller's allocator; where none is set, use torch's caching allocator."""
    import triton
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_torch_scratch)


def _torch_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Scratch bytes from torch's caching allocator (its blocks are 512-byte aligned)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.empty(size, dtype=torch.int8, device=device)


#: The config that fitted, per (kernel variant and device, config asked for).
_FITTED: dict[tuple, Any] = {}


def _launch_fitting(launch: Callable[[Any], None], config: Any, key: tuple) -> None:
    """`launch(config)`, or with the first of `tuning.smaller_configs` that fits in shared memory.

    The heuristic configs fit an H200 (tests/kernels/test_tuning.py) but not every GPU: 128-key
    tiles at d 128 take 224 KB with three stages, more than an A100's 164 KB. Triton then
    refuses at launch, before anything runs, so the same launch is retried smaller; the config
    that fitted is remembered for the next call. When none fits, a FlashprobeError names the
    problem.
    """
    from triton.runtime.errors import OutOfResources

    fitted = _FITTED.get((key, config))
    for candidate in [fitted] if fitted else [config, *tuning.smaller_configs(config)]:
        try:
            launch(candidate)
        except OutOfResources as error:
            last = error
            continue
        _FITTED[(key, config)] = candidate
        return
    raise FlashprobeError(
        f"no {key[0]} launch config fits this GPU's shared memory ({last}); try a narrower "
        "block_n, a 16-bit P̄ or a smaller head dim"
    )


def _forward_config(
    q: torch.Tensor, seq: int, head_dim: int, causal: bool, spec: KernelSpec, two_pass: bool,
    instrument: bool,
) -> tuning.FwdConfig:  # fmt: skip
    """The tuned (else heuristic) config; `seq`, the longer of the query and key lengths,
    picks the entry tuned nearest it (tuned on square shapes)."""
    if interpreting():
        return tuning.INTERPRETER_FWD
    return tuning.forward_config(
        tuning.arch_name(q.device), head_dim, causal, spec.block_n,
        tuning.dtype_name(q.dtype), forward_variant(spec, two_pass, instrument), seq,
    )  # fmt: skip


def forward_variant(spec: KernelSpec, two_pass: bool, instrument: bool) -> str:
    """The tuned-config variant name of this spec's forward (`tuning.fwd_variant`)."""
    return tuning.fwd_variant(
        two_pass, spec.p_bar_precision == "fp32", spec.accumulator == "bf16",
        stabilized=spec.softmax == "stabilized", stats=instrument,
    )  # fmt: skip


def _backward_config(
    q: torch.Tensor, seq: int, head_dim: int, causal: bool, fp32_dots: bool, atomic_dq: bool
) -> tuning.BwdConfig:
    if interpreting():
        return tuning.INTERPRETER_BWD
    return tuning.backward_config(
        tuning.arch_name(q.device), head_dim, causal, tuning.dtype_name(q.dtype),
        tuning.bwd_variant(fp32_dots, atomic_dq), seq,
    )  # fmt: skip


def _options(num_warps: int, num_stages: int, max_registers: int | None = None) -> dict[str, Any]:
    """Triton launch options (maxnreg only when capped)."""
    options: dict[str, Any] = {"num_warps": num_warps, "num_stages": num_stages, **_NO_FP_FUSION}
    if max_registers is not None:
        options["maxnreg"] = max_registers
    return options


def _row_strides(*tensors: torch.Tensor) -> tuple[int, ...]:
    """Batch, head and row strides of each [batch, heads, seq, head_dim] tensor, in order (the
    kernels' stride arguments; the last dimension is contiguous)."""
    return tuple(stride for t in tensors for stride in t.stride()[:3])


# Plain-Python versions of triton.cdiv / next_power_of_2: these run on every launch, and
# Triton's wrap them for use inside kernels too, at a few µs per call.
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 0


def last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()
