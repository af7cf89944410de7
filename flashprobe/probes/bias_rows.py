"""`flashprobe bias`'s synthetic rows: tied maxima, a tail `gap` below, one-signed V, and the
fp64 reference O (see probes.bias for the layout)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flashprobe.errors import FlashprobeError
from flashprobe.numerics.bits import round_to_bf16_exact
from flashprobe.probes.bias_config import TIE_GROUP, BiasConfig


@dataclass(frozen=True)
class Rows:
    """Scores, V and the fp64 reference O of one data setting."""

    s: torch.Tensor  # [B, 1, G, N] fp32, bf16-representable, unscaled
    v: torch.Tensor  # [B, 1, N, D] fp32, bf16-representable
    o_ref: torch.Tensor  # [B, 1, G, D] fp64
    o_ref_bf16: torch.Tensor  # o_ref rounded once to bf16 (as fp64)


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


def _fp32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32)


def make_rows(c: BiasConfig, ties: int, v_mean: float, tail_v_mean: float, per_row: int) -> Rows:
    """Synthetic rows; the same seed gives the same draws for every data setting, so variants
    are compared on common random numbers (a ties=1 row is its ties=2 row minus one tie)."""
    gen = torch.Generator().manual_seed(c.seed)
    g, n, d = per_row, c.keys, c.head_dim
    b = -(-c.rows // g)

    # tied keys: a random permutation gives each row of a block its own keys
    if c.tie_placement == "tile":
        groups = max(1, n // TIE_GROUP)
        width = min(TIE_GROUP, n)
        group = torch.stack([torch.randperm(groups, generator=gen)[:g] for _ in range(b)])
        within = torch.argsort(torch.rand(b, g, width, generator=gen), dim=-1)[..., :ties]
        tied = group[..., None] * width + within  # [B, G, ties]
    else:
        perm = torch.stack([torch.randperm(n, generator=gen) for _ in range(b)])
        tied = perm[:, : g * ties].reshape(b, g, ties)

    lo, hi = c.max_score
    # s_raw = q·kᵀ is fp32 in a real kernel; "bf16" puts the scores on the bf16 grid instead
    grid = _bf16 if c.score_grid == "bf16" else _fp32
    row_max = grid(lo + (hi - lo) * torch.rand(b, g, 1, generator=gen))
    gap = c.gap[0] + (c.gap[1] - c.gap[0]) * torch.rand(b, g, n, generator=gen)
    s = grid(row_max - gap)
    if (s >= row_max - 1e-3).any():
        raise FlashprobeError(
            "--gap is too small for the score magnitude: tail scores round onto the row max"
        )
    is_tied = torch.zeros(b, n, dtype=torch.bool)
    is_tied.scatter_(-1, tied.reshape(b, -1), True)
    # mask the keys other rows of the block tie on: their V is tied-distributed, and even a
    # few same-signed tail keys would skew the sign of the tiny tail sum (the sticky bits)
    s.masked_fill_(is_tied[:, None, :], -math.inf)
    s.scatter_(-1, tied, row_max.expand(b, g, ties).contiguous())

    z = torch.randn(b, n, d, generator=gen)
    bf16_max = torch.finfo(torch.bfloat16).max
    overflow = FlashprobeError(
        f"V ~ N({v_mean:g}, {c.v_std:g}) (tail mean {tail_v_mean:g}) overflows bf16 (largest "
        f"{bf16_max:.3g}); lower --v-mean, --tail-v-mean or --v-std"
    )
    if max(abs(v_mean), abs(tail_v_mean)) > bf16_max:  # torch.where would fail in fp32
        raise overflow
    mean = torch.where(is_tied, v_mean, tail_v_mean)[..., None]
    v = _bf16(mean + c.v_std * z)
    if not torch.isfinite(v).all():  # inf or NaN V: every error and verdict would be NaN
        raise overflow

    s = s[:, None].to(c.device)
    v = v[:, None].to(c.device)
    p = torch.softmax(s.double(), dim=-1)
    o_ref = p @ v.double()
    return Rows(s=s, v=v, o_ref=o_ref, o_ref_bf16=round_to_bf16_exact(o_ref))
