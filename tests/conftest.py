"""Shared fixtures. The error gate itself lives in `flashprobe.numerics.gate` (importable from
any test directory, unlike a conftest module).

Without CUDA, the Triton kernels run in Triton's interpreter, which is chosen when Triton and
each kernel are first imported: so TRITON_INTERPRET is set here, before any test module
imports them (on a machine with CUDA it is left alone, and `pytest -m gpu` runs compiled).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def random_qkv(
    b: int,
    h: int,
    m: int,
    n: int,
    d: int,
    dtype: torch.dtype,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    kv_heads: int | None = None,
) -> QKV:
    """q [B,H,M,D], k and v [B,H_kv,N,D] (H_kv = kv_heads, default H) and dO [B,H,M,D]:
    standard normal, drawn in fp32 on the CPU (so every device sees the same numbers), then
    cast."""
    gen = torch.Generator().manual_seed(seed)
    hk = h if kv_heads is None else kv_heads
    shapes = [(b, h, m, d), (b, hk, n, d), (b, hk, n, d), (b, h, m, d)]
    tensors = [torch.randn(s, generator=gen).to(device=device, dtype=dtype) for s in shapes]
    return tensors[0], tensors[1], tensors[2], tensors[3]


@pytest.fixture
def make_qkv() -> Callable[..., QKV]:
    """`make_qkv(b, h, m, n, d, dtype, seed=0, device="cpu", kv_heads=None)` → (q, k, v, dO)."""
    return random_qkv
