"""Fake FlashAttention packages for the benchmark's peer plumbing (no GPU, no flash_attn here)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F


@dataclass
class FakeFlashAttn:
    """What the fakes saw, and how they misbehave: `refuse(generation, q)` returns a message the
    forward raises as a RuntimeError (None: accept); `refuse_backward` the same for the
    backward; `fa3_returns_lse` makes FA3's flash_attn_func return (out, lse)."""

    calls: list[tuple[int, tuple[int, ...], bool, float, bool]] = field(default_factory=list)
    grads: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    refuse: Callable[[int, torch.Tensor], str | None] = lambda generation, q: None
    refuse_backward: Callable[[int, torch.Tensor], str | None] = lambda generation, q: None
    fa3_returns_lse: bool = True

    def module(self, name: str, generation: int, version: str | None) -> types.ModuleType:
        module = types.ModuleType(name)
        if version is not None:
            module.__version__ = version

        def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **kw):
            return self.attend(generation, q, k, v, softmax_scale, causal)

        module.flash_attn_func = flash_attn_func
        return module

    def attend(self, generation, q, k, v, scale, causal):
        """Attention on [B, N, H, D] tensors, as FlashAttention computes it (in torch)."""
        assert q.dim() == k.dim() == v.dim() == 4 and q.shape[2] % k.shape[2] == 0
        self.calls.append((generation, tuple(q.shape), q.is_contiguous(), scale, causal))
        if (message := self.refuse(generation, q)) is not None:
            raise RuntimeError(message)
        out = F.scaled_dot_product_attention(
            *(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal, scale=scale,
            enable_gqa=True,
        ).transpose(1, 2)  # fmt: skip
        if out.requires_grad:
            out.register_hook(lambda grad: self._backward(generation, q, grad))
        if generation == 3 and self.fa3_returns_lse:
            return out, torch.zeros(q.shape[0], q.shape[2], q.shape[1])
        return out

    def _backward(self, generation: int, q: torch.Tensor, grad: torch.Tensor) -> None:
        self.grads.append((generation, tuple(grad.shape)))
        if (message := self.refuse_backward(generation, q)) is not None:
            raise RuntimeError(message)


@pytest.fixture
def fake_flash_attn(monkeypatch: pytest.MonkeyPatch) -> FakeFlashAttn:
    """`flash_attn` (2.7.4) and `flash_attn_interface` (no __version__, as built from hopper/)
    importable for this test; delete one from sys.modules or set it to None to uninstall it."""
    fake = FakeFlashAttn()
    monkeypatch.setitem(sys.modules, "flash_attn", fake.module("flash_attn", 2, "2.7.4"))
    monkeypatch.setitem(
        sys.modules, "flash_attn_interface", fake.module("flash_attn_interface", 3, None)
    )
    return fake
