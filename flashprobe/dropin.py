"""Run an existing model's attention under a KernelSpec: `flashprobe.sdpa` and `patch_sdpa`.

    o = flashprobe.sdpa(q, k, v, is_causal=True, spec="paper-code")   # as F.sdpa, plus spec

    with flashprobe.patch_sdpa(spec="paper-code"):   # a nanoGPT or Hugging Face model's
        logits = model(idx)                          # F.scaled_dot_product_attention calls

`sdpa` has the signature of torch.nn.functional.scaled_dot_product_attention and computes the
same attention with the rounding of a KernelSpec (flashprobe.attention: Triton kernels on CUDA,
the emulator elsewhere). What it cannot do (an attention mask, dropout) is a one-line
FlashprobeError, never a silent fallback. Under autocast it runs in the autocast dtype (bf16),
as SDPA does, and as the kernels see the tensors in the project's GPT.

`patch_sdpa` swaps torch.nn.functional.scaled_dot_product_attention for `sdpa` with the chosen
spec while the block runs and restores whatever was there on exit, also on an exception; nested
blocks stack (the innermost spec applies), also when exited out of order. It patches the
attribute, so it reaches code that calls `F.scaled_dot_product_attention(...)` or
`torch.nn.functional.scaled_dot_product_attention` at call time (nanoGPT, Hugging Face's "sdpa"
attention), not a name imported before the block (`from torch.nn.functional import
scaled_dot_product_attention`). Not thread-safe: the patch is process-wide while it lasts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from flashprobe.backends import check_backend
from flashprobe.errors import FlashprobeError
from flashprobe.spec import KernelSpec, resolve_spec

__all__ = ["patch_sdpa", "sdpa"]

SpecLike = KernelSpec | str | Mapping[str, Any]


def sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    spec: SpecLike = "fa2",
    backend: str = "auto",
) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention, rounded as `spec` says.

    query [B, H, L, E] (or [B, L, E]), key and value [B, H_kv, S, E]; is_causal is top-left
    aligned, as SDPA's. H_kv < H needs enable_gqa=True, as SDPA. Not supported: attn_mask,
    dropout_p > 0, a value head size other than the query's, more than 4 dimensions.
    """
    from flashprobe.api import attention

    if attn_mask is not None:
        raise FlashprobeError(
            "flashprobe.sdpa: attn_mask is not supported (only is_causal=True or no mask); "
            "run the model without a padding mask, or keep this call on torch's SDPA"
        )
    if dropout_p:
        raise FlashprobeError(
            f"flashprobe.sdpa: dropout_p={dropout_p} is not supported (only 0.0); "
            "put the model in eval mode or set its attention dropout to 0"
        )
    for name, flag in (("is_causal", is_causal), ("enable_gqa", enable_gqa)):
        if not isinstance(flag, bool):  # torch's SDPA refuses these too; "False" is truthy
            raise FlashprobeError(f"flashprobe.sdpa: {name} must be True or False, got {flag!r}")
    if isinstance(scale, torch.Tensor) and scale.numel() == 1:
        scale = float(scale)  # a 0-d tensor, as torch's SDPA takes
    kernel_spec = resolve_spec(spec)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):  # before .dim(): an AttributeError says little
            raise FlashprobeError(
                f"flashprobe.sdpa: {name} must be a torch.Tensor, got {type(t).__name__}"
            )
    dims = query.dim()
    if dims not in (3, 4) or key.dim() != dims or value.dim() != dims:
        raise FlashprobeError(
            "flashprobe.sdpa: query, key and value must all be 4-D [B, H, L, E] or 3-D "
            f"[B, L, E], got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if value.shape[-1] != query.shape[-1]:
        raise FlashprobeError(
            f"flashprobe.sdpa: the value head size ({value.shape[-1]}) must equal the query's "
            f"({query.shape[-1]})"
        )
    if dims == 4 and key.shape[1] != query.shape[1] and not enable_gqa:
        raise FlashprobeError(
            f"flashprobe.sdpa: query has {query.shape[1]} heads and key {key.shape[1]}; pass "
            "enable_gqa=True for grouped-query attention (as torch's SDPA)"
        )
    if dims == 3:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    device = query.device.type
    # Under autocast SDPA runs in the autocast dtype, as autocast casts it: every floating
    # input but fp64 (which stays fp64); the kernels then decide every rounding.
    low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    with torch.autocast(device, enabled=False):
        if low is not None:
            query, key, value = (t if t.dtype == torch.float64 else t.to(low)
                                 for t in (query, key, value))  # fmt: skip
        out = attention(
            query, key, value, causal=is_causal, spec=kernel_spec, scale=scale, backend=backend
        )
    assert isinstance(out, torch.Tensor)
    return out.squeeze(1) if dims == 3 else out


@dataclass
class _Patch:
    """One patch_sdpa block: the function it replaced, and whether the block is still open."""

    previous: Callable[..., torch.Tensor]
    open: bool = True


def _live(function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The function a call reaches: past every closed patch_sdpa block's function to the one
    it replaced (blocks closed out of order leave theirs inside an open block's chain)."""
    patch = getattr(function, "__flashprobe_patch__", None)
    while patch is not None and not patch.open:
        function = patch.previous
        patch = getattr(function, "__flashprobe_patch__", None)
    return function


@contextlib.contextmanager
def patch_sdpa(spec: SpecLike = "fa2", *, backend: str = "auto") -> Iterator[KernelSpec]:
    """Route torch.nn.functional.scaled_dot_product_attention through `sdpa` with `spec` inside
    the block; yields the resolved KernelSpec. Restores the previous function on exit; blocks
    exited out of order (ExitStack, generators) restore the one open before them all."""
    kernel_spec = resolve_spec(spec)  # a bad spec fails here, before anything is patched
    check_backend(backend)
    patch = _Patch(previous=F.scaled_dot_product_attention)

    def routed(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        if not patch.open:  # reached through a patch made on top of this block, still in place
            extra = {"enable_gqa": True} if enable_gqa else {}  # as torch's SDPA takes them
            return _live(patch.previous)(
                query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                is_causal=is_causal, scale=scale, **extra,
            )  # fmt: skip
        return sdpa(
            query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
            spec=kernel_spec, backend=backend,
        )  # fmt: skip

    routed.__doc__ = f"flashprobe.sdpa with spec {kernel_spec.describe()} (flashprobe.patch_sdpa)"
    routed.__flashprobe_patch__ = patch  # type: ignore[attr-defined]
    F.scaled_dot_product_attention = routed
    try:
        yield kernel_spec
    finally:
        patch.open = False
        if F.scaled_dot_product_attention is routed:
            F.scaled_dot_product_attention = _live(patch.previous)
        # else a block opened inside this one is still open: it restores past this one
