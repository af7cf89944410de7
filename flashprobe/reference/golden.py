"""The fp64 golden attention that every variant's error is measured against.

The low inputs are upcast to fp64; softmax, products and δ = rowsum(dO∘O) are computed in fp64
with no rounding to judge. Causal masking is top-left aligned (query i sees keys j <= i). k, v
may have fewer heads than q (grouped-query attention, `flashprobe.reference.heads`). On the CPU
both run on one thread (`flashprobe.reference.threads`): the same inputs give the same bits
whatever thread count the process has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flashprobe.reference.heads import expand_kv, group_size, sum_groups
from flashprobe.reference.threads import measurement_threads

__all__ = ["GoldenBackward", "GoldenForward", "golden_backward", "golden_forward"]


@dataclass(frozen=True)
class GoldenForward:
    """o [B,H,M,D], lse [B,H,M] (natural log) and p [B,H,M,N] (normalised), all fp64."""

    o: torch.Tensor
    lse: torch.Tensor
    p: torch.Tensor | None = None


@dataclass(frozen=True)
class GoldenBackward:
    """dq, dk, dv and delta = rowsum(dO∘O) [B,H,M], all fp64."""

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    delta: torch.Tensor


def _scores(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float | None) -> torch.Tensor:
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        m, n = s.shape[-2:]
        hidden = torch.ones(m, n, dtype=torch.bool, device=s.device).triu(diagonal=1)
        s = s.masked_fill(hidden, -math.inf)
    return s


@measurement_threads()
def golden_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
) -> GoldenForward:
    group = group_size(q, k)
    q, k, v = (t.to(torch.float64) for t in (q, expand_kv(k, group), expand_kv(v, group)))
    s = _scores(q, k, causal, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    return GoldenForward(o=p @ v, lse=lse, p=p)


@measurement_threads()
def golden_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
) -> GoldenBackward:
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    fwd = golden_forward(q, k, v, causal=causal, scale=scale)
    group = group_size(q, k)
    q, k, v, do = (t.to(torch.float64) for t in (q, expand_kv(k, group), expand_kv(v, group), do))
    assert fwd.p is not None
    delta = (do * fwd.o).sum(dim=-1)
    ds = fwd.p * (do @ v.transpose(-2, -1) - delta[..., None])
    return GoldenBackward(
        dq=scale * (ds @ k),
        dk=sum_groups(scale * (ds.transpose(-2, -1) @ q), group),
        dv=sum_groups(fwd.p.transpose(-2, -1) @ do, group),
        delta=delta,
    )
