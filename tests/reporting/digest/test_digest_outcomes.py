"""digest.outcomes: diverged / not diverged / no outcome per seed; a cut run never counts as
'not diverged'."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashprobe.attribution.ranking import fisher_exact
from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.outcomes import (
    DIVERGED,
    NO_OUTCOME,
    NOT_DIVERGED,
    branch_point,
    control_check,
    seed_outcome,
    variant_outcomes,
)


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
    assert seed_outcome(cells[2]).label == "no outcome (cut at ≥2300)"
    assert seed_outcome(cells[0]).label == "diverged at 1500"
    assert seed_outcome(cells[1]).label == "3000, not diverged"


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
    assert seed_outcome(cells[4], 2000).why == "ended at 1000, before the horizon 2000"


def test_a_horizon_of_n_steps_ends_before_step_n(tmp_path: Path, make) -> None:
    """0-based steps: a run of 2000 steps trains steps 0-1999; one that diverged at step 2000
    did so in its 2001st step. At --horizon 2000 both are 'not diverged', as the same seed's
    rerun of 2000 steps would be."""
    cells = _cells(tmp_path, make, [
        make.cell("a", 0, planned=3000, diverged=2000),
        make.cell("a", 1, planned=2000),  # the same seed, 2000 steps: never saw step 2000
        make.cell("a", 2, planned=3000, diverged=1999),
    ])  # fmt: skip
    got = [(o.status, o.step) for o in (seed_outcome(c, horizon=2000) for c in cells)]
    assert got == [(NOT_DIVERGED, 2001), (NOT_DIVERGED, 2000), (DIVERGED, 1999)]


def test_a_gradient_runaway_is_looked_for_within_the_horizon(tmp_path: Path, make) -> None:
    """As `flashprobe report` does: a runaway past the horizon is not named at it (a seed that
    diverged after the horizon is 'not diverged' there, its late runaway no part of it)."""
    norms = [[s, 3.0, 0.3] for s in range(0, 2400, 10)] + [[2450, 9.0, 300.0]]
    (cell,) = _cells(tmp_path, make, [make.cell("a", 0, planned=3000, diverged=2500, loss=norms)])
    assert seed_outcome(cell).runaway is not None and seed_outcome(cell).runaway.step == 2450
    at_2000 = seed_outcome(cell, horizon=2000)
    assert at_2000.status == NOT_DIVERGED and at_2000.runaway is None
    assert "runaway" not in at_2000.label
    assert seed_outcome(cell, horizon=2451).runaway is not None


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
    assert data["no_outcome"] == {"4": {"reached": 20, "why": "cut at ≥20"}}
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


def test_a_control_seed_of_exactly_bound_steps_stopped_short(tmp_path: Path, make) -> None:
    """0-based steps: a seed of 2200 steps trained steps 0-2199, so it never ran step 2200,
    where a divergence would count as within the bound: it has not run that far."""
    cells = _cells(tmp_path, make, [
        make.cell("paper-code", 0, planned=4000, diverged=1100),
        make.cell("fp32", 0, planned=2200),
        make.cell("fp32", 1, planned=4000, diverged=2200),
    ])  # fmt: skip
    (check,) = control_check(variant_outcomes(cells, reference="paper-code"), "paper-code")
    assert check.bound == 2200 and not check.passed
    assert [s.seed for s in check.short] == [0] and [s.seed for s in check.early] == [1]


def test_control_check_at_twice_the_reference_median(tmp_path: Path, make) -> None:
    cells = _cells(tmp_path, make, [
        make.cell("paper-code", 0, planned=4000, diverged=1000),
        make.cell("paper-code", 1, planned=4000, diverged=1200),
        make.cell("fa2", 0, planned=4000),  # trained past 2200
        make.cell("fa2", 1, planned=4000, diverged=3000),  # diverged past 2200
        make.cell("fa2", 2, planned=4000, diverged=2200),  # diverged at 2200: within
        make.cell("fa2", 3, planned=4000, reached=1500, finished=False),  # cut short
        make.cell("fp32", 0, planned=4000),
        make.cell("fp32", 1, planned=2201),  # trained step 2200 itself: far enough
        make.cell("bf16", 0, planned=4000, reached=2199),  # one step short, finished
    ])  # fmt: skip
    checks = control_check(variant_outcomes(cells, reference="paper-code"), "paper-code")
    by = {c.row.variant: c for c in checks}
    assert set(by) == {"fa2", "fp32", "bf16"}
    fa2 = by["fa2"]
    assert fa2.bound == 2200 and not fa2.passed and fa2.verdict == "does not pass"
    assert [s.seed for s in fa2.early] == [2] and [s.seed for s in fa2.short] == [3]
    assert [s.seed for s in fa2.clean] == [0, 1]
    assert fa2.why == (
        "diverged within 2200: seed 2 at 2200; "
        "stopped short of 2200 without diverging: seed 3 at ≥1500; "
        "ran past 2200 without diverging by then: seed 0 (4000 steps), seed 1 (diverged at 3000)"
    )
    assert by["fp32"].passed and by["fp32"].verdict == "passes"
    assert not by["bf16"].passed and by["bf16"].why.startswith("stopped short of 2200")
    data = fa2.to_dict()
    assert data["reference_median_step"] == 1100 and data["passed"] is False
    assert data["diverged_within"] == {"2": 2200} and data["stopped_short"] == {"3": 1500}


def test_control_check_against_a_reference_of_another_suite(tmp_path: Path, make) -> None:
    cells = _cells(tmp_path, make, [
        make.cell("paper-code", 0, suite="quick", diverged=40),
        make.cell("fa2", 0, suite="controls"),
        make.cell("fa2", 1, suite="controls", diverged=60),
    ])  # fmt: skip
    rows = variant_outcomes(cells, reference="paper-code", reference_suite="quick")
    fa2 = next(r for r in rows if r.variant == "fa2")
    assert fa2.fisher_p == pytest.approx(fisher_exact(1, 2, 1, 1))
    (check,) = control_check(rows, "paper-code", "quick")
    assert check.reference.suite == "quick" and check.bound == 80
    assert [s.seed for s in check.early] == [1] and not check.passed
    assert control_check(rows, "paper-code") == []  # no paper-code in the suite itself


def test_a_branch_source_cut_at_the_branch_step_has_no_outcome(tmp_path: Path, make) -> None:
    source = make.cell("paper-code", 0, planned=500)
    branched = make.cell("acc-fp32", 0, planned=4000, diverged=1700)
    branched["meta"].update(branch_from="paper-code", branch_step=500)
    early = make.cell("paper-code", 1, planned=500, diverged=420)  # diverged before it
    cells = _cells(tmp_path, make, [source, early, branched])
    assert branch_point(cells) == ("paper-code", 500)
    got = seed_outcome(cells[0], branch=("paper-code", 500))
    assert (got.status, got.step) == (NO_OUTCOME, 500)
    assert got.label == "no outcome (branch source, trained to the branch step 500 only)"
    assert seed_outcome(cells[0]).status == NOT_DIVERGED  # without the branch point
    assert seed_outcome(cells[1], branch=("paper-code", 500)).status == DIVERGED
    rows = {r.variant: r for r in variant_outcomes(cells, reference="paper-code")}
    assert rows["paper-code"].n == 1 and rows["acc-fp32"].n == 1


def test_a_seed_the_loss_rule_let_pass_names_its_gradient_runaway(tmp_path: Path, make) -> None:
    calm = [[s, 1.0, 0.3] for s in range(0, 200, 10)]
    rising = [[200, 1.1, 3.0], [210, 1.2, 29.0], [220, 1.4, 31.0], [230, 1.5, 300.0]]
    cells = _cells(tmp_path, make, [
        make.cell("a", 0, planned=300, loss=calm + rising),
        make.cell("a", 1, planned=300, loss=calm),
        make.cell("a", 2, planned=300, loss=calm + rising, diverged=225),
        make.cell("a", 3, planned=300, reached=215, finished=False, loss=calm + rising[:2]),
    ])  # fmt: skip
    outcomes = [seed_outcome(c) for c in cells]
    assert outcomes[0].status == NOT_DIVERGED and outcomes[0].runaway is not None
    assert outcomes[0].to_dict()["gradient_runaway"]["step"] == 220
    assert outcomes[1].runaway is None and outcomes[1].to_dict()["gradient_runaway"] is None
    assert outcomes[2].runaway is not None and outcomes[2].runaway.step == 220  # before 225
    assert outcomes[3].status == NO_OUTCOME and outcomes[3].runaway is None  # not by step 215
    # the outcome table's steps per seed carries the flag, the counts do not change
    assert outcomes[0].label.endswith("not diverged (gradient runaway from 220)")
    assert outcomes[1].label.endswith("not diverged")
    assert outcomes[2].label == "diverged at 225 (gradient runaway from 220)"


def test_the_outcome_rows_label_a_half_step_median_as_such() -> None:
    """Two seeds' median can fall between steps: the outcomes figure's label reads 2,178.5,
    not 2,178."""
    from flashprobe.reporting.digest.outcomes import step_text

    assert step_text(2178.5, ",") == "2,178.5"
    assert step_text(1659, ",") == "1,659"
    assert step_text(1659.0, ",") == "1,659"


def test_each_seed_carries_its_held_loss_rise(tmp_path: Path, make) -> None:
    """From the rule's min_step, held for its patience in logged records (ceil(25 / 10) = 3)."""
    loss = [[s, x, 0.3] for s, x in [(0, 3.0), (10, 1.0), (20, 1.6), (30, 1.5), (40, 1.9),
                                     (50, 1.2), (60, 1.0)]]  # fmt: skip
    (raw,) = [make.cell("a", 0, planned=70, loss=loss, min_step=10)]
    raw["config"]["divergence"]["patience"] = 25
    raw["config"]["metrics"] = {"log_every": 10}
    (cell,) = _cells(tmp_path, make, [raw])
    assert seed_outcome(cell).loss_rise == pytest.approx(0.5)  # 1.6, 1.5, 1.9 over 1.0
    assert seed_outcome(cell).to_dict()["loss_rise"] == pytest.approx(0.5)
    assert seed_outcome(cell, horizon=40).loss_rise == pytest.approx(0.0)  # 1.0 .. 1.5
    raw["config"]["divergence"]["patience"] = 1
    (cell,) = _cells(tmp_path, make, [raw])
    assert seed_outcome(cell).loss_rise == pytest.approx(0.9)
