"""The bias experiment: the paper's one-sided rounding error, measured on synthetic rows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from flashprobe.probes.bias import run_bias
from flashprobe.probes.bias_config import BiasConfig
from flashprobe.probes.bias_result import EXCESS_SHARE_MIN, T_SIGNIFICANT
from flashprobe.spec import make_spec
from flashprobe.stats import AttentionStats

SEEDS = range(5)
SMALL = {"rows": 256}


def _run(seed: int, variants: tuple[str, ...], **kw: object) -> dict:
    report = run_bias(BiasConfig(seed=seed, variants=variants, **{**SMALL, **kw}))
    return {r.name: r for r in report.variants}


@pytest.mark.parametrize("seed", SEEDS)
def test_paper_kernel_is_biased_away_from_zero_and_the_fix_removes_it(seed: int) -> None:
    # the default 1024 rows: the fix's mean is ~1e-4, so fewer rows would let noise decide
    r = _run(seed, ("paper-code", "paper-sfa", "fa2", "exact"), rows=1024)
    std, fixed, fa2 = r["paper-code"], r["paper-sfa"], r["fa2"]
    assert std.t_stat < -10  # one-sided, with negative V: negative
    assert std.away_from_zero > 0 and std.frac_away > 0.6
    assert std.verdict == "biased away from zero"
    assert abs(fixed.mean_error) <= 0.1 * abs(std.mean_error)
    assert abs(fixed.excess_mean) <= 0.25 * abs(std.excess_mean)
    # FA2 rounds acc/ℓ once: it adds (almost) nothing to the ideal bf16 rounding of O
    assert abs(fa2.excess_mean) <= 0.05 * abs(std.excess_mean)
    # the fix removes the tied P̄ = 1 entries (other tiles' running maxima may remain)
    assert std.p_bar_ones_per_row - fixed.p_bar_ones_per_row >= 1.99
    assert fixed.tie_events_per_row >= 1


@pytest.mark.parametrize("seed", SEEDS)
def test_verdict_follows_the_excess_over_ideal_rounding(seed: int) -> None:
    """The two cases the raw error mislabels: fa2's O is the ideal bf16 rounding of the exact O
    (its raw error is one-sided only because ideal rounding's is), and paper-sfa at β 4 adds a
    one-sided excess that the larger, symmetric ideal-rounding error hides in the raw t."""
    r = _run(seed, ("exact", "fa2", "paper-sfa:beta=4", "paper-code"), rows=1024)
    exact, fa2, sfa4, paper = r["exact"], r["fa2"], r["paper-sfa:beta=4"], r["paper-code"]
    assert exact.verdict == "ideal rounding" and exact.t_stat > T_SIGNIFICANT
    assert fa2.t_stat > T_SIGNIFICANT  # raw: "toward zero", exactly as ideal rounding
    assert abs(fa2.excess_share) < EXCESS_SHARE_MIN and fa2.verdict == "no bias beyond rounding"
    assert abs(sfa4.t_stat) < T_SIGNIFICANT  # raw: looks unbiased
    assert sfa4.excess_t_stat < -T_SIGNIFICANT and sfa4.excess_share < -EXCESS_SHARE_MIN
    assert sfa4.verdict == "biased away from zero"  # V is negative, the excess too
    assert paper.verdict == "biased away from zero" and paper.excess_share < -0.5


def test_released_clamp_shrinks_o_toward_zero_at_beta_8() -> None:
    """A truly biased case of another kind: paper-sfa's clamp of each tile's row sum at 1e-10
    shrinks O by 2e^(−7r)/1e-10 on rows whose tied max r is shifted to 8r: below half on the
    rows of the default range [1, 5] with r > 3.49, (5 − 3.49)/4 ≈ 38% of them."""
    r = _run(0, ("paper-sfa:beta=8", "paper-sfa:beta=8,row_sum_floor=null"), rows=1024)
    clamped, unclamped = r["paper-sfa:beta=8"], r["paper-sfa:beta=8,row_sum_floor=null"]
    assert clamped.verdict == "biased toward zero" and clamped.excess_t_stat > 10
    assert 0.33 < clamped.shrunk_rows < 0.43
    assert unclamped.shrunk_rows == 0 and unclamped.verdict != "biased toward zero"


@pytest.mark.parametrize("seed", SEEDS)
def test_zero_mean_v_shows_no_bias(seed: int) -> None:
    r = _run(seed, ("paper-code", "fa2"), v_mean=0.0)
    for res in r.values():
        assert abs(res.t_stat) < 4, res
        assert res.away_from_zero is None and res.frac_away is None


def test_positive_v_mirrors_the_bias() -> None:
    r = _run(0, ("paper-code",), v_mean=2.5)
    assert r["paper-code"].t_stat > 10 and r["paper-code"].verdict == "biased away from zero"


def test_without_a_tail_there_are_no_sticky_bits_and_no_bias() -> None:
    # tail 40-50 below the max: too small even for fp32, so ties-to-even is left alone
    r = _run(0, ("paper-code",), gap=(40.0, 50.0))
    assert abs(r["paper-code"].t_stat) < 4


@pytest.mark.parametrize("seed", SEEDS)
def test_bf16_running_l_drops_the_tail_so_the_recomputed_softmax_sums_above_one(
    seed: int,
) -> None:
    # P̄ of the max is exactly 1, so ℓ = 1 + tail sits on the bf16 grid plus a tail below half
    # an ulp: rounding always drops it. Needs P̄ = 1, not a tie; fp32 ℓ and the β shift do not.
    acc = "paper-code:accumulator=fp32"
    r = _run(seed, ("paper-code", "paper-code:ties=1", acc, "fa2", "paper-sfa", "exact"))
    for name in ("paper-code", "paper-code:ties=1"):
        assert r[name].rowsum_t > 50 and r[name].rowsum_mean > 5e-5, r[name]
    for name in (acc, "fa2"):
        assert abs(r[name].rowsum_mean) < 1e-6, r[name]
    assert abs(r["paper-sfa"].rowsum_t) < 5
    assert r["exact"].rowsum_mean is None


def test_rowsum_without_a_tail_is_exact() -> None:
    # tail 40-50 below the max: nothing to drop, ℓ is exactly the tied count
    r = _run(0, ("paper-code",), gap=(40.0, 50.0))
    assert abs(r["paper-code"].rowsum_mean) < 1e-6


def test_variant_data_overrides_share_the_random_draws() -> None:
    r = _run(0, ("exact:ties=1", "fa2:ties=1", "exact:tail_v_mean=0", "fa2:tail_v_mean=0"))
    assert r["exact:ties=1"].ties == 1
    assert r["fa2:tail_v_mean=0"].tail_v_mean == 0.0
    assert r["fa2:tail_v_mean=0"].excess_mean == pytest.approx(0.0, abs=1e-6)
    assert r["exact:ties=1"].excess_mean == 0.0


def test_forward_is_called_like_a_kernel() -> None:
    seen = []

    def fake_forward(s_raw, v, spec, *, scale, causal, low_dtype):
        seen.append((s_raw.shape, v.shape, spec, scale, causal, low_dtype))
        p = torch.softmax(s_raw.double(), -1)
        o = (p @ v.double()).float().to(torch.bfloat16)
        z = torch.zeros(s_raw.shape[:-1], dtype=torch.int32)
        lse = torch.logsumexp(s_raw.double(), -1).float()
        return SimpleNamespace(o=o, lse=lse, stats=AttentionStats(z.float(), z.float(), z, z + 7))

    report = run_bias(
        BiasConfig(rows=16, keys=64, head_dim=4, variants=("sfa:beta=4",)), fake_forward
    )
    (shape, vshape, spec, scale, causal, low) = seen[0]
    assert shape[-1] == 64 and vshape[-2:] == (64, 4)
    assert spec == make_spec("sfa", {"beta": 4})
    assert (scale, causal, low) == (1.0, False, torch.bfloat16)
    assert report.variants[0].p_bar_ones_per_row == 7
    assert abs(report.variants[0].rowsum_mean) < 1e-6  # an exact lse: the softmax sums to 1
