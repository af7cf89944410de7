"""attribution.runaway: the first logged gradient norm ≥ 100× the median of the earlier ones."""

from __future__ import annotations

import math

import pytest

from flashprobe.attribution.runaway import (
    RUNAWAY_HISTORY,
    GradientRunaway,
    gradient_runaway,
    runaway_note,
)

CALM = [(s, 0.3) for s in range(0, 200, 10)]
RISING = [(200, 3.0), (210, 29.0), (220, 31.0), (230, 300.0)]


def test_the_first_norm_past_100x_the_earlier_median() -> None:
    found = gradient_runaway(CALM + RISING)
    assert found is not None and (found.step, found.grad_norm) == (220, 31.0)
    assert found.earlier_median == pytest.approx(0.3)  # 29 at 210 is 97×: not yet
    assert found.describe() == "gradient norm 31 at step 220, 103× its earlier median 0.3"
    assert found.to_dict() == {"step": 220, "grad_norm": 31.0, "earlier_median": 0.3}


def test_none_by_the_horizon_none_when_calm_and_none_without_history() -> None:
    assert gradient_runaway(CALM + RISING, horizon=215) is None
    assert gradient_runaway(CALM) is None
    short = [(s, 0.3) for s in range(RUNAWAY_HISTORY - 1)] + [(99, 1e6)]
    assert gradient_runaway(short) is None


def test_missing_and_non_finite_norms_are_skipped() -> None:
    noisy = [(0, None), (5, math.nan), *CALM, (205, math.inf), *RISING]
    found = gradient_runaway(noisy)
    assert found is not None and found.step == 220


def test_the_note_names_the_runs_or_is_absent() -> None:
    assert runaway_note([]) == []
    first, second = GradientRunaway(220, 31.0, 0.3), GradientRunaway(40, 500.0, 2.0)
    (note,) = runaway_note([("a", 1, first), ("b", 2, second)])
    assert note.endswith(f"a seed 1: {first.describe()}; b seed 2: {second.describe()}")
    assert "100×" in note
