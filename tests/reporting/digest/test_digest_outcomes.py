"""digest.outcomes: diverged / not diverged / no outcome per seed; a cut run never counts as
'not diverged'."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashprobe.attribution.ranking import fisher_exact
from flashprobe.reporting.digest.outcomes import (
    DIVERGED,
    NO_OUTCOME,
    NOT_DIVERGED,
    control_check,
    seed_outcome,
    variant_outcomes,
)
from flashprobe.reporting.digest.schema import load_digest


def _cells(tmp_path: Path, make, cells):
    return list(load_digest(make.digest(tmp_path / "d.json", cells)).cells)


def test_seed_outcomes_without_a_horizon(tmp_path: Path, make) -> None:
    cells = _cells(tmp_path, make, [
        make.cell("a", 0, planned=3000, diverged=1500),
        make.cell("a", 1, planned=3000),  # finished clean
        make.cell("a", 2, planned=3000, reached=2300, finished=False),  # cut
        make.cell("a", 3, planned=3000, diverged=900, finished=False),  # cut after diverging
    ])  # fmt: skip
    got = [(o.status, o.step) for o in map(seed_outcome, cells)]
    assert got == [(DIVERGED, 1500), (NOT_DIVERGED, 3000), (NO_OUTCOME, 2300), (DIVERGED, 900)]
    assert "cut at ≥2300 steps" in seed_outcome(cells[2]).why


def test_seed_outcomes_at_a_horizon(tmp_path: Path, make) -> None:
    cells = _cells(tmp_path, make, [
        make.cell("a", 0, planned=3000, diverged=2500),  # diverged after the horizon
        make.cell("a", 1, planned=3000, diverged=1500),
        make.cell("a", 2, planned=3000, reached=2100, finished=False),  # cut past it
        make.cell("a", 3, planned=3000, reached=1800, finished=False),  # cut before it
        make.cell("a", 4, planned=1000),  # finished before it
    ])  # fmt: skip
    got = [(o.status, o.step) for o in (seed_outcome(c, horizon=2000) for c in cells)]
    assert got == [
        (NOT_DIVERGED, 2501),
        (DIVERGED, 1500),
        (NOT_DIVERGED, 2100),
        (NO_OUTCOME, 1800),
        (NO_OUTCOME, 1000),
    ]
    assert "before the horizon 2000" in seed_outcome(cells[3], 2000).why
    assert "ended at 1000 steps" in seed_outcome(cells[4], 2000).why


def test_variant_rows_median_and_fisher(tmp_path: Path, make) -> None:
    ref = [make.cell("paper-code", s, diverged=d) for s, d in enumerate([14, 32, 16, 15, 17])]
    ctl = [make.cell("fa2", s) for s in range(4)] + [
        make.cell("fa2", 4, reached=20, finished=False)
    ]
    rows = variant_outcomes(_cells(tmp_path, make, ref + ctl), reference="paper-code")
    base, fa2 = rows
    assert (base.variant, base.n, len(base.diverged), base.median_step) == ("paper-code", 5, 5, 16)
    assert base.fisher_p is None  # the reference itself
    assert (fa2.n, len(fa2.diverged), len(fa2.no_outcome)) == (4, 0, 1)
    assert fa2.fisher_p == pytest.approx(fisher_exact(0, 4, 5, 5))
    assert fa2.fisher_p < 0.01
    data = fa2.to_dict()
    assert data["no_outcome"] == {"4": {"reached": 20, "why": "cut at ≥20 steps, unfinished"}}
    assert data["not_diverged_reached"] == {"0": 100, "1": 100, "2": 100, "3": 100}


def test_no_fisher_without_outcomes_or_reference(tmp_path: Path, make) -> None:
    cells = _cells(tmp_path, make, [
        make.cell("paper-code", 0, diverged=10),
        make.cell("fa2", 0, reached=50, finished=False),
        make.cell("paper-code", 0, diverged=10, point=[("lr", 1)]),
        make.cell("fa2", 0, point=[("lr", 2)]),  # no reference at its point
    ])  # fmt: skip
    rows = variant_outcomes(cells, reference="paper-code")
    assert [r.fisher_p for r in rows] == [None, None, None, None]
    assert [r.fisher_p for r in variant_outcomes(cells)] == [None] * 4


def test_control_check_at_twice_the_reference_median(tmp_path: Path, make) -> None:
    cells = _cells(tmp_path, make, [
        make.cell("paper-code", 0, planned=4000, diverged=1000),
        make.cell("paper-code", 1, planned=4000, diverged=1200),
        make.cell("fa2", 0, planned=4000),  # trained past 2200
        make.cell("fa2", 1, planned=4000, diverged=3000),  # diverged past 2200
        make.cell("fa2", 2, planned=4000, diverged=2000),  # diverged before 2200
        make.cell("fa2", 3, planned=4000, reached=1500, finished=False),  # cut short
    ])  # fmt: skip
    (line,) = control_check(variant_outcomes(cells, reference="paper-code"), "paper-code")
    assert "twice paper-code's median divergence step is 2200" in line
    assert "2 of 4 seeds trained past it without diverging" in line
    assert "1 diverged before it (seed 2 at 2000)" in line
    assert "1 stopped short of it without diverging (seed 3 at ≥1500): no verdict" in line
