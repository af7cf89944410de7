"""The synthetic rows: bf16 V, tied maxima in one key tile, masked neighbours, fp32 scores."""

from __future__ import annotations

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.probes.bias_config import BiasConfig
from flashprobe.probes.bias_rows import make_rows


def test_rows_are_bf16_with_ties_and_masks() -> None:
    c = BiasConfig(rows=40, keys=256, head_dim=8, ties=3, seed=3, score_grid="bf16")
    data = make_rows(c, 3, -2.5, 0.0, per_row=8)
    s, v = data.s, data.v
    assert s.shape == (5, 1, 8, 256) and v.shape == (5, 1, 256, 8)
    finite = s[torch.isfinite(s)]
    assert torch.equal(finite, finite.to(torch.bfloat16).float())
    assert torch.equal(v, v.to(torch.bfloat16).float())
    row_max = s.amax(-1, keepdim=True)
    assert ((s == row_max).sum(-1) == 3).all()
    # the other 7 rows' tied keys are masked: each row sees keys - 7·ties keys
    assert (torch.isinf(s).sum(-1) == 7 * 3).all()
    gaps = (row_max - s)[torch.isfinite(s) & (s != row_max)]
    assert gaps.min() >= 12 - 0.25 and gaps.max() <= 30 + 0.25
    # ties share an aligned 16-key group (one key tile for any block_n)
    groups = (s == row_max).nonzero()[:, -1].reshape(5, 8, 3) // 16
    assert (groups == groups[..., :1]).all()
    # tied keys carry V ~ N(-2.5, 0.5), the others N(0, 0.5)
    tied_cols = (s == row_max).any(2)[:, 0]
    assert v[:, 0][tied_cols].mean().item() == pytest.approx(-2.5, abs=0.1)
    assert v[:, 0][~tied_cols].mean().item() == pytest.approx(0.0, abs=0.05)


def test_default_scores_are_fp32_like_q_dot_k() -> None:
    data = make_rows(BiasConfig(rows=16, keys=256, head_dim=4), 2, -2.5, -2.5, per_row=8)
    finite = data.s[torch.isfinite(data.s)]
    assert not torch.equal(finite, finite.to(torch.bfloat16).float())
    assert ((data.s == data.s.amax(-1, keepdim=True)).sum(-1) == 2).all()


@pytest.mark.parametrize(
    ("v_mean", "v_std"),
    [(-1e308, 0.5), (-2.5, 1e308), (-3.38e38, 1e37)],  # fp32; inf·z = NaN; bf16 overflow
)
def test_a_v_that_overflows_bf16_is_one_line(v_mean: float, v_std: float) -> None:
    """Not a RuntimeError from torch.where, nor NaN errors with a verdict."""
    c = BiasConfig(rows=16, keys=256, head_dim=4, v_std=v_std)
    with pytest.raises(FlashprobeError, match="overflows bf16"):
        make_rows(c, 2, v_mean, v_mean, per_row=8)
