"""FlashAttention's own kernels as `flashprobe bench` peers, timed only where they are installed.

FlashAttention-2 (`flash_attn`) and FlashAttention-3 for Hopper (`flash_attn_interface`, built
from the project's hopper/ folder) take q, k, v as [B, N, H, D] where flashprobe uses
[B, H, N, D]: the benchmark hands them inputs already in their layout, so no copy is timed.
A peer that cannot run raises `PeerUnavailable`, whose message is the one line the table shows.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from flashprobe.errors import FlashprobeError

if TYPE_CHECKING:
    from flashprobe.probes.benchmark import BenchShape

NOT_INSTALLED = "not installed"
_MAX_HEAD_DIM = 256  # both generations' largest compiled head dim


class PeerUnavailable(FlashprobeError):
    """A peer that cannot run here: "not installed" or "unsupported: <reason>"."""


@dataclass(frozen=True)
class FlashAttnPeer:
    name: str  # the implementation's name in tables and JSON
    module: str  # what `import` loads; its flash_attn_func is timed
    distributions: tuple[str, ...]  # where the version is, when the module has no __version__


PEERS = {
    2: FlashAttnPeer("flash-attn-2", "flash_attn", ("flash_attn",)),
    3: FlashAttnPeer("flash-attn-3", "flash_attn_interface", ("flash_attn_3", "flashattn_hopper")),
}


def load(generation: int) -> ModuleType:
    peer = PEERS[generation]
    try:
        return importlib.import_module(peer.module)
    except ModuleNotFoundError as exc:
        if exc.name == peer.module:
            raise PeerUnavailable(NOT_INSTALLED) from None
        raise PeerUnavailable(f"unsupported: cannot import {peer.module}: {exc}") from None
    except (ImportError, OSError) as exc:  # installed, but built for another torch/CUDA/GPU
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PeerUnavailable(f"unsupported: cannot import {peer.module}: {line}") from None


def version(generation: int) -> str | None:
    """The installed version (None: not importable here)."""
    try:
        module = load(generation)
    except PeerUnavailable:
        return None
    if hasattr(module, "__version__"):
        return str(module.__version__)
    for dist in PEERS[generation].distributions:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def unsupported(
    generation: int, shape: BenchShape, capability: tuple[int, int] | None
) -> str | None:
    """Why this generation cannot run `shape` on a GPU of `capability` (None: it can, as far as
    is known before calling it; the library's own refusals are caught when it runs)."""
    if capability is not None:
        sm = f"sm_{capability[0]}{capability[1]}"
        if generation == 3 and capability[0] != 9:
            return f"FlashAttention-3 needs an sm_90 (Hopper) GPU, this is {sm}"
        if generation == 2 and capability < (8, 0):
            return f"FlashAttention-2 needs sm_80 or newer, this is {sm}"
    if shape.head_dim > _MAX_HEAD_DIM:
        return f"head dim {shape.head_dim} > {_MAX_HEAD_DIM}"
    return None


def attend_fn(generation: int, shape: BenchShape, scale: float) -> Callable[..., torch.Tensor]:
    """attend(q, k, v) on [B, N, H, D] tensors; raises PeerUnavailable before any GPU work."""
    module = load(generation)
    capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    reason = unsupported(generation, shape, capability)
    if reason is not None:
        raise PeerUnavailable(f"unsupported: {reason}")
    flash_attn_func = module.flash_attn_func

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = flash_attn_func(q, k, v, softmax_scale=scale, causal=shape.causal)
        return out[0] if isinstance(out, tuple) else out  # some FA3 versions add the LSE

    return attend
