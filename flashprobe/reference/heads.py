"""Grouped-query attention (GQA, MQA): several query heads share one key/value head.

Query head h reads key/value head h // group, with group = query heads ÷ key/value heads
(consecutive query heads share, as in `torch.repeat_interleave` and SDPA's `enable_gqa`). A
shared head's gradient is the sum of its query heads' gradients; flashprobe sums them in the
working precision and rounds once (docs/semantics.md, "Grouped-query attention").
"""

from __future__ import annotations

import torch

from flashprobe.errors import FlashprobeError

__all__ = ["expand_kv", "group_size", "sum_groups"]


def group_size(q: torch.Tensor, k: torch.Tensor) -> int:
    """Query heads per key/value head of q [B, H, M, D] and k [B, H_kv, N, D]."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads == 0 or heads % kv_heads:
        raise FlashprobeError(
            f"q has {heads} heads and k, v have {kv_heads}: the key/value heads must divide "
            "the query heads (grouped-query attention)"
        )
    return heads // kv_heads


def expand_kv(t: torch.Tensor, group: int) -> torch.Tensor:
    """[B, H_kv, N, D] → [B, H_kv·group, N, D], each key/value head repeated for its group."""
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def sum_groups(t: torch.Tensor, group: int) -> torch.Tensor:
    """[B, H_kv·group, N, D] → [B, H_kv, N, D]: the sum over each group (in t's dtype)."""
    return t if group == 1 else t.unflatten(1, (-1, group)).sum(dim=2)
