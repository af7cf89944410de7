"""`flashprobe.attention`: a drop-in, differentiable attention that rounds as a KernelSpec says.

    o = flashprobe.attention(q, k, v, causal=True, spec="sfa")
    o, stats = flashprobe.attention(q, k, v, spec={"preset": "fa2", "block_n": 32},
                                    return_stats=True)

Backends (flashprobe.backends): "emulator" (PyTorch, any device, the ground truth), "triton"
(the CUDA kernels in `flashprobe.kernels`), "auto" (triton for CUDA tensors when the kernels are
available, else the emulator).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from flashprobe.backends import BACKENDS, load_triton, tensor_backend
from flashprobe.errors import FlashprobeError
from flashprobe.reference.emulator import emulate_forward
from flashprobe.reference.emulator_backward import emulate_backward
from flashprobe.reference.heads import group_size
from flashprobe.spec import KernelSpec, resolve_spec
from flashprobe.stats import AttentionStats

__all__ = ["BACKENDS", "attention"]

#: fp64 runs the emulator with fp64 intermediates (for gradcheck); kernels take the others.
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


class _EmulatedAttention(torch.autograd.Function):
    """Forward and backward by the reference emulator; stats come back as non-differentiable."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        spec: KernelSpec,
        causal: bool,
        scale: float | None,
    ) -> tuple[torch.Tensor, ...]:
        fwd = emulate_forward(q, k, v, spec, causal=causal, scale=scale)
        # Only delta_source = o_fp32 needs the unrounded O; don't hold it otherwise.
        o_fp32 = fwd.o_fp32 if spec.delta_source == "o_fp32" else None
        ctx.save_for_backward(q, k, v, fwd.o, fwd.lse, o_fp32)
        ctx.spec, ctx.causal, ctx.scale = spec, causal, scale
        stats = fwd.stats
        outputs = (stats.lse, stats.row_max, stats.tie_events, stats.p_bar_ones)
        ctx.mark_non_differentiable(*outputs)
        return (fwd.o, *outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, do: torch.Tensor, *_stats_grads: Any) -> tuple[Any, ...]:
        q, k, v, o, lse, o_fp32 = ctx.saved_tensors
        grads = emulate_backward(
            q, k, v, o, do, lse, ctx.spec, causal=ctx.causal, scale=ctx.scale, o_fp32=o_fp32
        )
        return grads.dq, grads.dk, grads.dv, None, None, None


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    spec: KernelSpec | str | Mapping[str, Any] = "fa2",
    *,
    scale: float | None = None,
    backend: str = "auto",
    return_stats: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, AttentionStats]:
    """Attention of q [B,H,M,D] over k, v [B,H_kv,N,D], rounded as `spec` says; differentiable.

    H_kv may divide H (grouped-query attention: query head h reads key/value head h // (H / H_kv)).

    causal: top-left aligned (query i sees keys j <= i). scale defaults to 1/sqrt(D).
    spec: a KernelSpec, a preset name, or a mapping of fields (optionally with `preset`).
    return_stats: also return the per-row `AttentionStats` (lse, row max, tie events, P̄ ones).
    Bad input raises `FlashprobeError` with a one-line message.
    """
    kernel_spec = resolve_spec(spec)
    _check_inputs(q, k, v, causal, scale)
    if not isinstance(return_stats, bool):  # any truthy value would change the return type
        raise FlashprobeError(f"return_stats must be True or False, got {return_stats!r}")
    if tensor_backend(backend, q) == "triton":
        triton_attention = load_triton()
        return triton_attention(
            q, k, v, causal=causal, spec=kernel_spec, scale=scale, return_stats=return_stats
        )

    _check_emulator_memory(q, k)
    o, lse, row_max, tie_events, p_bar_ones = _EmulatedAttention.apply(
        q, k, v, kernel_spec, causal, scale
    )
    if return_stats:
        return o, AttentionStats(
            lse=lse, row_max=row_max, tie_events=tie_events, p_bar_ones=p_bar_ones
        )
    return o


# -- input checks ----------------------------------------------------------------------------
#: Bytes the emulator holds per attention score at its peak (forward and backward): measured
#: about 39 on a CPU (B = H = 1, N 4096, fp32); rounded down, so the check below refuses only
#: what cannot fit.
EMULATOR_BYTES_PER_SCORE = 32


def _check_emulator_memory(q: torch.Tensor, k: torch.Tensor) -> None:
    """The emulator materialises every B·H·M·N score (it is the reference, not a flash
    kernel): refuse at once a problem that cannot fit in the device's memory, instead of
    swapping or being killed minutes later."""
    batch, heads, seq_q, _ = q.shape
    need = batch * heads * seq_q * k.shape[2] * EMULATOR_BYTES_PER_SCORE
    have = device_memory(q.device)
    if have is not None and need > have:
        raise FlashprobeError(
            f"the emulator would hold {batch}×{heads}×{seq_q}×{k.shape[2]} attention scores "
            f"(≈ {need / 2**30:.0f} GiB), more than this device's {have / 2**30:.0f} GiB; "
            "use the Triton kernels on a GPU (backend='triton'), or shorter sequences"
        )


def device_memory(device: torch.device) -> int | None:
    """Total memory of `device` in bytes (a CUDA GPU's, or this machine's RAM), or None where
    it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    if device.type != "cpu":
        return None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # not POSIX, or not reported
        return None


def _check_inputs(q: Any, k: Any, v: Any, causal: Any, scale: Any) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise FlashprobeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise FlashprobeError(
                f"{name} must be 4-D (batch, heads, seq, head_dim), got shape {tuple(t.shape)}"
            )
        if t.numel() == 0:
            raise FlashprobeError(f"{name} is empty (shape {tuple(t.shape)})")
    if not (q.dtype == k.dtype == v.dtype):
        raise FlashprobeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if q.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
        raise FlashprobeError(f"dtype {q.dtype} is not supported; use one of: {names}")
    if not (q.device == k.device == v.device):
        raise FlashprobeError(
            f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise FlashprobeError(
            "expected q [B,H,M,D] and k, v [B,H_kv,N,D], got shapes "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    group_size(q, k)
    if not isinstance(causal, bool):
        raise FlashprobeError(f"causal must be True or False, got {causal!r}")
    if scale is not None and (
        isinstance(scale, bool)
        or not isinstance(scale, int | float)
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise FlashprobeError(f"scale must be a finite number > 0, got {scale!r}")
