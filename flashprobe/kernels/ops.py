"""The Triton attention as `torch.library` custom ops, for `torch.compile`.

Dynamo cannot trace the launch code (tuned-config lookups, Triton's JIT, the shared-memory
retry), so under `torch.compile` `triton_attention` calls these two opaque ops instead: the
compiled graph keeps one forward and one backward node per attention and fuses everything
around them, with no graph break. The ops run the same `attention_forward` /
`attention_backward` as the eager path, so both compute the same bits.

A KernelSpec crosses the op boundary as its JSON, `spec.json` (custom-op arguments must be
plain types). The forward op takes the backward's `dq_accumulation` too: the autograd
registration sees only the forward's inputs.
Outputs a call does not ask for (fp32 O, stats) come back as empty tensors.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import torch

from flashprobe.kernels.launch import attention_backward, attention_forward, last_dim_contiguous
from flashprobe.spec import KernelSpec

_NOTHING = (0,)


@lru_cache(maxsize=256)
def _spec(text: str) -> KernelSpec:
    return KernelSpec(**json.loads(text))


@torch.library.custom_op("flashprobe::attention_fwd", mutates_args=())
def attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    spec: str,
    scale: float,
    instrument: bool,
    dq_accumulation: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """o, lse, o_fp32 (empty unless spec's δ source is o_fp32), row_max, tie_events,
    p_bar_ones (the last three empty unless `instrument`); `dq_accumulation` is the
    backward's."""
    kernel_spec = _spec(spec)
    q, k, v = (last_dim_contiguous(t) for t in (q, k, v))
    out = attention_forward(q, k, v, causal=causal, spec=kernel_spec, scale=scale,
                            instrument=instrument,
                            keep_o_fp32=kernel_spec.delta_source == "o_fp32")  # fmt: skip
    o32 = out.o_fp32 if out.o_fp32 is not None else _nothing(q, torch.float32)
    if out.stats is None:  # outputs may not alias: three distinct empty tensors
        stats = (_nothing(q, torch.float32), _nothing(q, torch.int32), _nothing(q, torch.int32))
    else:
        stats = (out.stats.row_max, out.stats.tie_events, out.stats.p_bar_ones)
    return out.o, out.lse, o32, *stats


def _nothing(like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return like.new_empty(_NOTHING, dtype=dtype)


@attention_fwd.register_fake
def _(q, k, v, causal, spec, scale, instrument, dq_accumulation):  # type: ignore[no-untyped-def]
    rows = q.shape[:3]
    o32_shape = q.shape if _spec(spec).delta_source == "o_fp32" else _NOTHING
    stat_shape = rows if instrument else _NOTHING
    return (
        q.new_empty(q.shape),
        q.new_empty(rows, dtype=torch.float32),
        q.new_empty(o32_shape, dtype=torch.float32),
        q.new_empty(stat_shape, dtype=torch.float32),
        q.new_empty(stat_shape, dtype=torch.int32),
        q.new_empty(stat_shape, dtype=torch.int32),
    )


@torch.library.custom_op("flashprobe::attention_bwd", mutates_args=())
def attention_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    o_fp32: torch.Tensor,
    causal: bool,
    spec: str,
    scale: float,
    dq_accumulation: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv; o_fp32 is the forward's (empty when the spec does not use it)."""
    q, k, v = (last_dim_contiguous(t) for t in (q, k, v))
    return attention_backward(q, k, v, o, lse, do, causal=causal, spec=_spec(spec), scale=scale,
                              o_fp32=o_fp32 if o_fp32.numel() else None,
                              dq_accumulation=dq_accumulation)  # type: ignore[arg-type]  # fmt: skip


@attention_bwd.register_fake
def _(q, k, v, o, lse, do, o_fp32, causal, spec, scale, dq_accumulation):  # type: ignore[no-untyped-def]
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, causal, spec, scale, _instrument, dq_accumulation = inputs
    o, lse, o32 = output[:3]
    ctx.save_for_backward(q, k, v, o, lse, o32)
    ctx.causal, ctx.spec, ctx.scale = causal, spec, scale
    ctx.dq_accumulation = dq_accumulation
    ctx.mark_non_differentiable(*output[1:])


def _backward(ctx: Any, do: torch.Tensor, *_unused: Any) -> tuple:
    q, k, v, o, lse, o32 = ctx.saved_tensors
    dq, dk, dv = attention_bwd(q, k, v, o, lse, do.contiguous(), o32, ctx.causal, ctx.spec,
                               ctx.scale, ctx.dq_accumulation)  # fmt: skip
    return dq, dk, dv, None, None, None, None, None


attention_fwd.register_autograd(_backward, setup_context=_setup_context)
