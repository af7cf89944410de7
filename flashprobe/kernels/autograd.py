"""`triton_attention`: the differentiable entry point to the Triton kernels.

Eagerly it is an autograd.Function around `launch.attention_forward` / `attention_backward`;
under `torch.compile` it calls the same launches as the custom ops of `kernels.ops`, which
dynamo keeps whole (one node each way, no graph break). Both paths compute the same bits.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from flashprobe.backends import KERNEL_DTYPES, KERNEL_HEAD_DIMS
from flashprobe.errors import FlashprobeError
from flashprobe.kernels import ops
from flashprobe.kernels.launch import (
    DqAccumulation,
    attention_backward,
    attention_forward,
    check_dq_accumulation,
    interpreting,
    last_dim_contiguous,
)
from flashprobe.reference.heads import group_size
from flashprobe.spec import KernelSpec, resolve_spec
from flashprobe.stats import AttentionStats


def triton_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    spec: KernelSpec | str | Any = None,
    scale: float | None = None,
    return_stats: bool = False,
    dq_accumulation: DqAccumulation = "ordered",
) -> torch.Tensor | tuple[torch.Tensor, AttentionStats]:
    """Flash attention with the rounding points of `spec` (docs/semantics.md); differentiable.

    q: [B, H, M, D], k and v: [B, H_kv, N, D] (H_kv dividing H: grouped-query attention), bf16
    or fp16, on CUDA (or on CPU under TRITON_INTERPRET=1). Causal masking is top-left aligned.
    Returns o [B, H, M, D] in the input dtype, plus per-row AttentionStats when `return_stats`
    (instrumentation costs nothing when off: it is a compile-time switch).
    dq_accumulation: "ordered" (deterministic) or "atomic" (faster; dQ's fp32 summation order
    varies from run to run): `launch.DqAccumulation`.
    """
    spec = resolve_spec(spec)
    scale = _check_inputs(q, k, v, scale)
    check_dq_accumulation(dq_accumulation)
    if torch.compiler.is_compiling():
        o, lse, _o32, row_max, tie_events, p_ones = ops.attention_fwd(
            q, k, v, causal, spec.json, scale, return_stats, dq_accumulation
        )
        if not return_stats:
            return o
        return o, AttentionStats(lse=lse, row_max=row_max, tie_events=tie_events, p_bar_ones=p_ones)
    if return_stats:
        o, lse, row_max, tie_events, p_ones = _TritonAttention.apply(
            q, k, v, causal, spec, scale, True, dq_accumulation
        )
        return o, AttentionStats(lse=lse, row_max=row_max, tie_events=tie_events, p_bar_ones=p_ones)
    return _TritonAttention.apply(q, k, v, causal, spec, scale, False, dq_accumulation)


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        spec: KernelSpec,
        scale: float,
        return_stats: bool,
        dq_accumulation: DqAccumulation,
    ) -> Any:
        q, k, v = (last_dim_contiguous(t) for t in (q, k, v))
        out = attention_forward(q, k, v, causal=causal, spec=spec, scale=scale,
                                instrument=return_stats,
                                keep_o_fp32=spec.delta_source == "o_fp32")  # fmt: skip
        ctx.save_for_backward(q, k, v, out.o, out.lse, out.o_fp32)
        ctx.causal, ctx.spec, ctx.scale = causal, spec, scale
        ctx.dq_accumulation = dq_accumulation
        if not return_stats:
            return out.o
        stats = out.stats
        assert stats is not None
        extras = (stats.lse, stats.row_max, stats.tie_events, stats.p_bar_ones)
        ctx.mark_non_differentiable(*extras)
        return (out.o, *extras)

    @staticmethod
    @torch.autograd.function.once_differentiable  # no graph of the kernels' backward: refuse
    def backward(ctx: Any, do: torch.Tensor, *_unused: Any) -> Any:  # double backward loudly
        q, k, v, o, lse, o_fp32 = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, causal=ctx.causal, spec=ctx.spec,
                                        scale=ctx.scale, o_fp32=o_fp32,
                                        dq_accumulation=ctx.dq_accumulation)  # fmt: skip
        return dq, dk, dv, None, None, None, None, None


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None) -> float:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise FlashprobeError(f"{name} must be a 4-D tensor [batch, heads, seq, head_dim]")
        if t.dtype not in KERNEL_DTYPES:
            raise FlashprobeError(
                f"{name} must be bf16 or fp16 for the Triton kernels, got {t.dtype}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise FlashprobeError("q, k and v must share one dtype")
    if not (q.device == k.device == v.device):
        raise FlashprobeError("q, k and v must be on one device")
    head_dim = q.shape[3]
    if k.shape[0] != q.shape[0] or k.shape != v.shape or k.shape[3] != head_dim:
        raise FlashprobeError("k and v must have one shape, with q's batch and head_dim")
    group_size(q, k)
    if head_dim not in KERNEL_HEAD_DIMS:
        raise FlashprobeError(f"head_dim must be one of {KERNEL_HEAD_DIMS} for the Triton kernels")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise FlashprobeError("sequence lengths must be positive")
    if q.device.type != "cuda" and not interpreting():
        raise FlashprobeError(
            "the Triton kernels need CUDA tensors; on CPU set TRITON_INTERPRET=1 before "
            "importing flashprobe.kernels"
        )
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise FlashprobeError(f"scale must be a finite number > 0, got {scale}")
    return scale
