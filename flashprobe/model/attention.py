"""Causal self-attention whose heads may each use a different attention implementation.

Per-head choices are implemented by splitting the heads into groups that share one
`AttentionConfig` (see `ModelConfig.head_groups`), running each group's attention on its slice of
Q, K, V, and concatenating the outputs back into head order. Each head's attention is
independent of the others, so this is exact; it costs one gather per group when a layer is split.

Grouped-query attention (n_kv_head < n_head): query head h reads key/value head h // group. A
layer with one head group passes the shared K, V to its attention as they are. A split layer
gives each group the key/value heads it reads: as shared heads when the group holds every query
head of them, else one copy per query head, taken from fp32 K, V so that autograd sums the
copies' gradients in fp32 and rounds once, as the kernels do for shared heads.

Precision: the ``flashprobe`` kernels decide their own rounding (docs/semantics.md), so they run
with autocast turned off and get inputs cast to the autocast dtype (bf16): exactly the tensors a
fused kernel would see. ``math`` upcasts to fp32; ``sdpa`` runs in whatever dtype autocast gives.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from flashprobe.backends import tensor_backend
from flashprobe.model.config import AttentionConfig, HeadGroup
from flashprobe.model.instrument import AttentionRecorder, LayerStats
from flashprobe.reference.heads import expand_kv, group_size

AttentionFn = Callable[..., Any]
#: Rows per sequence on which instrumented steps check what the backward's softmax sums to.
SUM_CHECK_ROWS = 64


def flashprobe_attention() -> AttentionFn:
    """`flashprobe.attention`, imported on first use (tests may replace this function)."""
    from flashprobe.api import attention

    return attention


class GroupResult:
    """One head group's output, plus its log-sum-exp and per-head stats when asked for."""

    __slots__ = ("lse", "o", "stats")

    def __init__(self, o: torch.Tensor, lse: torch.Tensor | None, stats: LayerStats | None) -> None:
        self.o, self.lse, self.stats = o, lse, stats


class CausalSelfAttention(nn.Module):
    def __init__(
        self,
        n_embd: int,
        n_head: int,
        groups: tuple[HeadGroup, ...],
        layer: int,
        bias: bool,
        n_kv_head: int,
    ) -> None:
        super().__init__()
        self.n_head, self.n_kv_head, self.n_embd, self.layer = n_head, n_kv_head, n_embd, layer
        self.kv_dim = n_kv_head * (n_embd // n_head)
        #: Per head group: its attention config and the Q, K, V heads it reads.
        self.group_runs = tuple(
            (g.attention, GroupInputs.of(g.heads, n_head, n_kv_head)) for g in groups
        )
        self.c_attn = nn.Linear(n_embd, n_embd + 2 * self.kv_dim, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.recorder: AttentionRecorder | None = None  # set by GPT.instrument()
        order = [h for g in groups for h in g.heads]
        # Position of head h in the concatenated group outputs (identity for one group).
        self.register_buffer("_unsplit", torch.argsort(torch.tensor(order)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split((self.n_embd, self.kv_dim, self.kv_dim), dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k, v = (t.view(B, T, self.n_kv_head, C // self.n_head).transpose(1, 2) for t in (k, v))
        rec = self.recorder
        want_stats = rec is not None and rec.collect_stats
        capture = rec is not None and rec.wants_capture(self.layer)

        results = [
            _run_group(config, *inputs.select(q, k, v), want_stats=want_stats, want_lse=capture)
            for config, inputs in self.group_runs
        ]
        o = self._unsplit_heads([r.o for r in results])
        if rec is not None:
            if want_stats:
                rec.add_stats(
                    self.layer, LayerStats.concat([r.stats for r in results], self._unsplit)
                )  # type: ignore[misc]
                rec.watch_key_grad(self.layer, k, q)
            if capture:
                lse = self._unsplit_heads([r.lse for r in results])  # type: ignore[misc]
                rec.capture(self.layer, x=_as_matmul_input(x), q=q, k=k, v=v, o=o, lse=lse)
        y = o.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def _unsplit_heads(self, parts: list[torch.Tensor]) -> torch.Tensor:
        if len(parts) == 1:
            return parts[0]
        return torch.cat(parts, dim=1).index_select(1, self._unsplit)


def _as_matmul_input(x: torch.Tensor) -> torch.Tensor:
    """The layer input X as c_attn's matmul consumes it (and autograd saves it for dW = dQᵀX):
    cast to the autocast dtype when autocast is on (bf16 under bf16 training), else as is."""
    device = x.device.type
    if torch.is_autocast_enabled(device) and x.is_floating_point():
        return x.to(torch.get_autocast_dtype(device))
    return x


@dataclass(frozen=True)
class GroupInputs:
    """Which query heads and key/value heads one head group's attention reads.

    kv_heads: the key/value heads passed along (None: all of them, as they are). `per_query`:
    one key/value copy per query head (a group holding only part of a shared head's queries).
    """

    heads: tuple[int, ...] | None
    kv_heads: tuple[int, ...] | None
    per_query: bool = False

    @classmethod
    def of(cls, heads: tuple[int, ...], n_head: int, n_kv_head: int) -> GroupInputs:
        if heads == tuple(range(n_head)):
            return cls(None, None)
        group = n_head // n_kv_head
        shared = sorted({h // group for h in heads})
        if group == 1 or set(heads) == {kv * group + i for kv in shared for i in range(group)}:
            return cls(heads, tuple(shared))
        return cls(heads, tuple(h // group for h in heads), per_query=True)

    def select(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.heads is None:
            return q, k, v
        heads = torch.tensor(self.heads, device=q.device)
        kv_heads = torch.tensor(self.kv_heads, device=q.device)
        if self.per_query:  # fp32 copies: their gradients are summed in fp32 (module docstring)
            k, v = k.float(), v.float()
        return q.index_select(1, heads), k.index_select(1, kv_heads), v.index_select(1, kv_heads)


def _run_group(
    config: AttentionConfig,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    want_stats: bool,
    want_lse: bool,
) -> GroupResult:
    if config.impl == "flashprobe":
        return _flashprobe(config, q, k, v, want_stats=want_stats or want_lse)
    if config.impl == "math":
        o = _math_attention(q, k, v)
    else:
        o = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1]
        )
    if not (want_stats or want_lse):
        return GroupResult(o, None, None)
    lse, row_max = _scores_summary(q, k)
    return GroupResult(o, lse, LayerStats.from_rows(row_max, None, None))


def _flashprobe(
    config: AttentionConfig, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, want_stats: bool
) -> GroupResult:
    device = q.device.type
    low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    with torch.autocast(device, enabled=False):
        if low is not None:
            q, k, v = q.to(low), k.to(low), v.to(low)
        out = flashprobe_attention()(
            q, k, v, causal=True, spec=config.spec, backend=config.backend, return_stats=want_stats
        )
    if not want_stats:
        return GroupResult(out, None, None)
    o, stats = out
    on_kernels = tensor_backend(config.backend, q) == "triton"
    sum_error = _softmax_sum_error(q, k, stats.lse, config.spec, on_kernels=on_kernels)
    return GroupResult(
        o,
        stats.lse,
        LayerStats.from_rows(stats.row_max, stats.tie_events, stats.p_bar_ones, sum_error),
    )


def _softmax_sum_error(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, spec: Any, *, on_kernels: bool = False
) -> Any:
    """ΣP − 1 (batch × heads × rows) of the softmax the backward will recompute from this
    forward's lse. On the Triton kernels: every row, in one kernel launch. Otherwise (the
    emulator): SUM_CHECK_ROWS evenly spaced rows ending with the last, since each row costs
    the emulator a q·kᵀ row and ~30 small torch ops in all."""
    from flashprobe.reference.emulator import default_scale
    from flashprobe.reference.emulator_backward import softmax_sum_error_qk

    if on_kernels:
        from flashprobe.kernels.launch import softmax_sum_error
        from flashprobe.spec import resolve_spec

        scale = default_scale(q.shape[-1])
        return softmax_sum_error(q, k, lse, causal=True, spec=resolve_spec(spec), scale=scale)
    n = q.shape[-2]
    rows = torch.arange(n - 1, -1, -max(1, n // SUM_CHECK_ROWS), device=q.device).flip(0)
    scale = default_scale(q.shape[-1])
    return softmax_sum_error_qk(q, k, lse, spec, causal=True, scale=scale, rows=rows)


def _math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Standard attention in fp32 (materialised scores, no tiling, no low-precision step)."""
    with torch.autocast(q.device.type, enabled=False):
        group = group_size(q, k)
        q, k, v = q.float(), expand_kv(k.float(), group), expand_kv(v.float(), group)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        scores = scores.masked_fill(_causal_mask(q.shape[-2], q.device), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


@torch.no_grad()
def _scores_summary(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 log-sum-exp and row max of the scaled causal scores (for sdpa/math instrumentation)."""
    with torch.autocast(q.device.type, enabled=False):
        k = expand_kv(k.float(), group_size(q, k))
        scores = (q.float() @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        scores = scores.masked_fill(_causal_mask(q.shape[-2], q.device), float("-inf"))
        return torch.logsumexp(scores, dim=-1), scores.amax(dim=-1)


def _causal_mask(n: int, device: torch.device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
