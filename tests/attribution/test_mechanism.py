"""Mechanism metrics on errors whose answer is known."""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.attribution import mechanism as mech
from flashprobe.spec import make_spec


def test_coherence_identical_vs_random() -> None:
    g = torch.Generator().manual_seed(0)
    same = torch.randn(16, 32, generator=g)
    assert mech.coherence([same] * 50) == pytest.approx(1.0)
    steps = 100
    noise = [torch.randn(16, 32, generator=g) for _ in range(steps)]
    assert mech.coherence(noise) == pytest.approx(1 / math.sqrt(steps), rel=0.2)
    series = mech.ErrorSeries()
    for e in noise:
        series.add(e)
    assert series.coherence() == pytest.approx(mech.coherence(noise))


def test_single_step_coherence_is_undefined() -> None:
    series = mech.ErrorSeries()
    series.add(torch.ones(3, 4))
    assert math.isnan(series.coherence())


def test_direction_similarity_and_rank1_share() -> None:
    g = torch.Generator().manual_seed(1)
    u, v = torch.randn(64, generator=g), torch.randn(128, generator=g)
    lowrank = mech.ErrorSeries()
    for scale in (1.0, -2.0, 0.5):  # same rank-1 direction, any sign and size
        lowrank.add(scale * torch.outer(u, v))
    assert lowrank.direction_similarity() == pytest.approx(1.0)
    assert lowrank.rank1_share() == pytest.approx(1.0)
    rand = mech.ErrorSeries()
    for _ in range(20):
        rand.add(torch.randn(64, 128, generator=g))
    assert rand.direction_similarity() < 0.1
    assert rand.rank1_share() < 0.1


@pytest.mark.parametrize(("bias", "expected"), [(1.0, 1.0), (0.0, 0.5)])
def test_growth_exponent_bias_vs_noise(bias: float, expected: float) -> None:
    g = torch.Generator().manual_seed(2)
    rows = bias + 0.1 * torch.randn(400, 1024, generator=g, dtype=torch.float64)
    if bias == 0.0:
        rows = torch.randn(400, 1024, generator=g, dtype=torch.float64)
    grid = mech.prefix_grid(1024, 8)
    assert grid == [8, 16, 32, 64, 128, 256, 512, 1024]
    k = mech.growth_exponent(grid, mech.prefix_rms(rows, grid))
    assert k == pytest.approx(expected, abs=0.06)


def test_signed_error_and_relative_error() -> None:
    err = torch.tensor([[1.0, 1.0], [1.0, 3.0], [2.0, 2.0]])  # row means 1, 2, 2
    mean, t = mech.signed_error(err)
    assert mean == pytest.approx(5 / 3)
    assert t == pytest.approx((5 / 3) / (float(torch.tensor([1.0, 2, 2]).std()) / math.sqrt(3)))
    assert mech.signed_error(torch.zeros(4, 1)) == (0.0, 0.0)
    assert mech.relative_error(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0])) == 1.0
    assert mech.cumulative([1.0, 2.0, -1.0]) == [1.0, 3.0, 2.0]
    assert math.isnan(mech.growth_exponent([8], [1.0]))


def test_non_finite_errors_have_no_direction_instead_of_crashing() -> None:
    """A variant whose kernel returned NaN (stabilized underflow) must not abort the replay."""
    series = mech.ErrorSeries()
    series.add(torch.full((4, 3), math.nan))
    series.add(torch.ones(4, 3))
    assert math.isnan(series.rank1_share()) is False  # the finite step still counts
    assert math.isnan(series.direction_similarity())
    u, v, share = mech.top_direction(torch.tensor([1.0, math.inf]))
    assert u is None and torch.isnan(v).all() and math.isnan(share)


def test_key_shift_leak_is_zero_for_exact_gradients_and_reads_a_planted_leak() -> None:
    from flashprobe.reference.golden import golden_backward

    torch.manual_seed(0)
    q, k, v, do = (torch.randn(2, 3, 40, 16, dtype=torch.float64) for _ in range(4))
    exact = golden_backward(q, k, v, do, causal=True).dk
    leak, _ = mech.key_shift_leak(exact, q)
    assert leak < 1e-12
    # A common offset along −mean(q) in every key's gradient: a leak that raises the scores.
    offset = -q.mean(dim=-2, keepdim=True) * 0.01
    leak, drift = mech.key_shift_leak(exact + offset, q)
    expected = float(torch.linalg.vector_norm(offset.expand_as(exact).sum(dim=-2).flatten()))
    expected /= float(torch.linalg.vector_norm((exact + offset).flatten()))
    assert leak == pytest.approx(expected, rel=1e-9)
    assert drift == pytest.approx(1.0, abs=1e-6)
    assert mech.key_shift_leak(exact - offset, q)[1] == pytest.approx(-1.0, abs=1e-6)
    assert math.isnan(mech.key_shift_leak(torch.zeros_like(exact), q)[0])


def test_bf16_running_accumulators_leak_more_than_fp32_attention() -> None:
    """The emulated paper kernel breaks shift invariance far above the bf16 output floor."""
    from flashprobe.reference.emulator import emulate_forward
    from flashprobe.reference.emulator_backward import emulate_backward

    torch.manual_seed(0)
    shape = (1, 2, 256, 32)
    q = ((torch.randn(shape) + torch.randn(32)) * 4 / 32**0.25).bfloat16()
    k = ((torch.randn(shape) + torch.randn(32)) / 32**0.25).bfloat16()
    v = (torch.randn(shape) * 0.5 + 1.0).bfloat16()
    do = (torch.randn(shape) * 1e-2 + 3e-3).bfloat16()
    leaks = {}
    for name in ("paper-code", "fp32"):
        fwd = emulate_forward(q, k, v, name, causal=True)
        bwd = emulate_backward(q, k, v, fwd.o, do, fwd.lse, name, causal=True, o_fp32=fwd.o_fp32)
        leaks[name] = mech.key_shift_leak(bwd.dk, q)[0]
    assert leaks["fp32"] < 5e-3  # bf16 rounding of dK only
    assert leaks["paper-code"] > 5 * leaks["fp32"]


def test_softmax_sum_bias_is_one_sided_only_with_a_bf16_running_l() -> None:
    """Peaked rows (each query's own key dominates): a bf16 ℓ drops the tails, so the softmax
    the backward recomputes sums above 1 (t over rows); fp32 ℓ leaves fp32 rounding only."""
    from flashprobe.reference.emulator import emulate_forward

    g = torch.Generator().manual_seed(1)
    shape = (12, 1, 256, 16)
    q = torch.randn(shape, generator=g)
    k = (6 * q + 0.5 * torch.randn(shape, generator=g)).bfloat16()
    q, v = q.bfloat16(), torch.randn(shape, generator=g).bfloat16()
    out = {}
    for name in ("paper-code", "paper-code:l32", "fa2"):
        spec = make_spec("paper-code", {"l_accumulator": "fp32"}) if name.endswith("l32") else name
        lse = emulate_forward(q, k, v, spec, causal=True, scale=0.25).lse
        rec = mech.softmax_sum_record(q, k, lse, spec, causal=True, scale=0.25)
        out[name] = rec["softmax_sum_bias"], rec["softmax_sum_t"]
    mean, t = out["paper-code"]
    assert mean > 5e-5 and t > 4, out
    for name in ("paper-code:l32", "fa2"):
        assert abs(out[name][0]) < 1e-6, out


def test_softmax_sum_record_splits_the_bias_by_tied_row_maxima() -> None:
    """Keys 0-63 each appear twice (keys 64-127 once): a row whose largest score falls on a
    doubled key has a tied maximum. An injected ΣP − 1 of ε sits on every row alike, so both
    halves of the split read ε and the tied rows' share of the sum is their share of rows."""
    from flashprobe.reference.emulator import emulate_forward

    g = torch.Generator().manual_seed(3)
    distinct = torch.randn(1, 1, 192, 16, generator=g)
    k = torch.cat([distinct[:, :, :64], distinct[:, :, :64], distinct[:, :, 64:128]], dim=2)
    q = 4 * torch.randn(1, 1, 256, 16, generator=g)
    q, k = q.bfloat16(), k.bfloat16()
    v = torch.randn(1, 1, 192, 16, generator=g).bfloat16()
    spec = make_spec("fa2", {"row_sum_bias": 1e-3})
    lse = emulate_forward(q, k, v, spec, causal=False, scale=0.25).lse
    rec = mech.softmax_sum_record(q, k, lse, spec, causal=False, scale=0.25)
    top = (q.float() @ k.float().transpose(-2, -1)).argmax(dim=-1).flatten()
    want_tied = float((top < 64).double().mean())  # argmax picks the first of a doubled key
    assert 0.2 < want_tied < 0.8 and rec["tied_rows"] == pytest.approx(want_tied)
    for name in ("softmax_sum_bias", "softmax_sum_bias_tied", "softmax_sum_bias_untied"):
        assert rec[name] == pytest.approx(1e-3, rel=1e-2), (name, rec)
    assert rec["softmax_sum_tied_share"] == pytest.approx(want_tied, rel=1e-2)


def test_row_max_ties_counts_keys_at_the_rounded_maximum() -> None:
    """bf16 scores tie 100 and 100.25 (spacing 0.5 there); fp32 scores do not. A masked key
    never counts, a fully masked row counts 0."""
    from flashprobe.reference.emulator_backward import row_max_ties

    inf = math.inf
    s = torch.tensor([[100.0, 100.25, 3.0, -inf], [100.0, 99.0, 100.0, 1.0], [-inf] * 4])
    got = {name: row_max_ties(s, name, scale=1.0, low_dtype=torch.bfloat16).tolist()
           for name in ("fa2", "paper-code")}  # fmt: skip
    assert got == {"fa2": [1, 2, 0], "paper-code": [2, 2, 0]}
