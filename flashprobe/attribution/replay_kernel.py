"""One variant's forward and backward on replayed tensors: the emulator or the Triton kernels
(their own launches, so δ is the kernel's own), with the instrumentation the replay reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from flashprobe.spec import KernelSpec

#: run_kernel's signature: (q, k, v, do, spec, *, causal, scale, backend) → KernelRun
KernelFn = Callable[..., "KernelRun"]


@dataclass(frozen=True)
class KernelRun:
    """One variant's forward and backward on [B, h, T, D] inputs."""

    o: torch.Tensor
    delta: torch.Tensor
    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    tie_events: torch.Tensor | None
    p_bar_ones: torch.Tensor | None
    lse: torch.Tensor | None = None  # the forward's, [B, h, T] fp32


def run_kernel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    spec: KernelSpec,
    *,
    causal: bool,
    scale: float,
    backend: str,
) -> KernelRun:
    if backend == "triton":
        return _run_triton(q, k, v, do, spec, causal=causal, scale=scale)
    from flashprobe.reference.emulator import emulate_forward
    from flashprobe.reference.emulator_backward import emulate_backward

    fwd = emulate_forward(q, k, v, spec, causal=causal, scale=scale)
    bwd = emulate_backward(
        q, k, v, fwd.o, do.to(q.dtype), fwd.lse, spec, causal=causal, scale=scale,
        o_fp32=fwd.o_fp32,
    )  # fmt: skip
    return KernelRun(
        fwd.o, bwd.delta, bwd.dq, bwd.dk, bwd.dv, fwd.stats.tie_events, fwd.stats.p_bar_ones,
        fwd.lse,
    )  # fmt: skip


def _run_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    spec: KernelSpec,
    *,
    causal: bool,
    scale: float,
) -> KernelRun:
    # The kernel engineer's launch functions, so δ is the kernel's own (not recomputed here).
    from flashprobe.kernels.launch import attention_backward, attention_delta, attention_forward

    q, k, v, do = (t.contiguous() for t in (q, k, v, do.to(q.dtype)))
    keep = spec.delta_source == "o_fp32"
    fwd = attention_forward(
        q, k, v, causal=causal, spec=spec, scale=scale, instrument=True, keep_o_fp32=keep
    )
    kw = {"causal": causal, "spec": spec, "scale": scale, "o_fp32": fwd.o_fp32}
    delta = attention_delta(q, k, v, fwd.o, fwd.lse, do, **kw)
    dq, dk, dv = attention_backward(q, k, v, fwd.o, fwd.lse, do, **kw)
    stats = fwd.stats
    return KernelRun(
        fwd.o, delta, dq, dk, dv,
        stats.tie_events if stats else None, stats.p_bar_ones if stats else None, fwd.lse,
    )  # fmt: skip
