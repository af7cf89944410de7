"""Failure rules: divergence, logit and gradient runaway, on records and on a store with a
branched cell."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from flashprobe.attribution.failure import FailureRule, counted, failure_steps, steps_trained
from flashprobe.attribution.ranking import outcomes
from flashprobe.errors import FlashprobeError
from flashprobe.store import reader as sr
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.cell_config import normalise_cell_config
from flashprobe.suites.suite import cell_key, expand_suite

RUNAWAY = FailureRule("logit-runaway", logit_limit=100.0)


def stats(step: int, **layers: list[float | None]) -> dict[str, Any]:
    """A metrics record with per-layer, per-head max logits (layer names 'l0' → '0')."""
    return {"step": step, "attention": {k[1:]: {"max_logit": v} for k, v in layers.items()}}


def test_divergence_rule_reads_the_summary_only() -> None:
    rule = FailureRule()
    records = [stats(5, l0=[1e9])]
    assert rule.step({"diverged": True, "diverged_step": 40}, records) == 40
    assert rule.step({"diverged": False, "diverged_step": None}, records) is None
    assert rule.step(None, records) is None


def test_runaway_is_the_first_sample_over_the_limit_or_not_finite() -> None:
    records = [stats(10, l0=[5.0, 99.0]), stats(20, l0=[5.0], l1=[101.0]), stats(30, l0=[1e4])]
    assert RUNAWAY.step(None, records) == 20
    assert RUNAWAY.step(None, records[:1]) is None
    assert RUNAWAY.step(None, [stats(7, l0=[None])]) == 7  # the recorder writes NaN as None
    assert RUNAWAY.step(None, [stats(8, l0=[math.inf])]) == 8
    only_0 = FailureRule("logit-runaway", logit_limit=100.0, layers=(0,))
    assert only_0.step(None, records) == 30
    # a divergence before the runaway is the failure; after it, the runaway is
    assert RUNAWAY.step({"diverged": True, "diverged_step": 15}, records) == 15
    assert RUNAWAY.step({"diverged": True, "diverged_step": 25}, records) == 20


def norms(*values: float, start: int = 0) -> list[dict[str, Any]]:
    """Metrics records with these gradient norms, every 10 steps from `start`."""
    return [{"step": start + 10 * i, "loss": 1.0, "grad_norm": g} for i, g in enumerate(values)]


def test_gradient_runaway_is_the_first_norm_at_100x_its_earlier_median_or_a_divergence() -> None:
    rule = FailureRule.from_suite({"event": "gradient-runaway"})
    records = norms(*[0.3] * 12, 29.0, 31.0)  # 29 < 100 × 0.3 ≤ 31
    assert rule.step(None, records) == 130
    assert rule.step(None, records[:13]) is None
    assert rule.step({"diverged": True, "diverged_step": 50}, records) == 50
    assert rule.step({"diverged": True, "diverged_step": 200}, records) == 130
    assert FailureRule().step(None, records) is None  # the loss rule alone does not see it
    assert dataclasses.replace(rule, horizon=130).step(None, records) is None
    assert rule.noun == "gradient runaway" and "100×" in rule.describe()


def test_a_gradient_runaway_on_a_store_counts_a_branched_cells_own_norms(tmp_path: Path) -> None:
    root = make_store(tmp_path, 30)
    cells = {c.variant: c for c in sr.read_cells(root)}
    # the source's 2 norms before the branch (steps 0, 10) would complete fa2's history of 10
    # by its step 100: with them it runs away there; its own steps decide (runaway.py): 140
    (cells["paper-code"].run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in norms(*[0.3] * 4))
    )
    own = norms(*[0.3] * 8, 40.0, *[0.3] * 3, 40.0, start=20)  # 40 at steps 100 and 140
    (cells["fa2"].run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in own))
    rule = FailureRule("gradient-runaway")
    failed = failure_steps(list(cells.values()), rule)
    assert failed[cells["fa2"].path] == 140
    assert failed[cells["paper-code"].path] is None
    assert failure_steps(list(cells.values()), FailureRule())[cells["fa2"].path] is None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"event": "loss-spike"}, "failure.event must be one of"),
        ({"event": "logit-runaway", "logit_limit": 0}, "failure.logit_limit must be > 0"),
        ({"event": "logit-runaway", "logit_limit": "big"}, "bad failure section"),
        ({"event": "logit-runaway", "layers": [-1]}, "failure.layers must be"),
        ({"limit": 3}, "unknown failure key 'limit'"),
        ("runaway", "failure must be a mapping"),
    ],
)
def test_bad_sections_are_one_line_errors(section: Any, message: str) -> None:
    with pytest.raises(FlashprobeError, match=message):
        FailureRule.from_suite(section)


def test_layers_are_checked_against_the_model() -> None:
    rule = FailureRule("logit-runaway", layers=(0, 3))
    rule.check_layers(4)
    with pytest.raises(FlashprobeError, match=r"layer 3 out of range 0\.\.2"):
        rule.check_layers(3)
    FailureRule().check_layers(1)  # every layer: nothing to check


def test_section_defaults() -> None:
    assert FailureRule.from_suite(None) == FailureRule()
    rule = FailureRule.from_suite({"event": "logit-runaway", "layers": 1})
    assert rule == FailureRule("logit-runaway", 1000.0, (1,))
    assert "layer 1" in rule.describe() and rule.noun == "logit runaway"


SUITE = {
    "name": "runaway",
    "seeds": [0],
    "base": {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32},
        "train": {"steps": 40, "batch_size": 2, "device": "cpu", "checkpoint_every": 20},
        "kernel": {"preset": "paper-code"},
    },
    "variants": {
        "paper-code": {},
        "fa2": {"kernel": {"preset": "fa2"}},
        "acc-fp32": {"kernel": {"accumulator": "fp32"}},
    },
    "branch": {"from": "paper-code", "step": 20},
}


def make_store(root: Path, source_runaway: int) -> Path:
    """paper-code runs away at `source_runaway`; fa2 (branched at 20) at 30 in its own steps;
    acc-fp32 (branched at 20) never, and is cut off at step 30 without a summary."""
    store = ResultStore(root)
    cells = expand_suite(SUITE, validate=normalise_cell_config).cells
    source = next(c for c in cells if c.variant == "paper-code")
    logits = {"paper-code": {source_runaway: 500.0}, "fa2": {30: 500.0}, "acc-fp32": {}}
    for cell in cells:
        extra = {"source_key": cell_key(source, "test")} if cell.branch_from else {}
        path = store.open_cell(cell, "test", {"device": "cpu"}, extra)
        (path / "run").mkdir()
        start = 0 if cell.branch_from is None else 20
        last = 30 if cell.variant == "acc-fp32" else 40
        rows = [stats(s, l1=[logits[cell.variant].get(s, 50.0)]) for s in range(start, last, 10)]
        (path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if cell.variant != "acc-fp32":
            store.finish(path, {"diverged": False, "diverged_step": None, "steps_done": 40})
    return root


def by_variant(cells: list[sr.CellView], rule: FailureRule) -> dict[str, int | None]:
    steps = failure_steps(cells, rule)
    return {c.variant: steps[c.path] for c in cells}


@pytest.mark.parametrize(
    ("source_runaway", "expected"),
    [
        (10, {"paper-code": 10, "fa2": 10, "acc-fp32": 10}),  # before the branch: inherited
        (30, {"paper-code": 30, "fa2": 30, "acc-fp32": None}),  # after it: the source's own
    ],
)
def test_a_branched_cell_inherits_its_source_steps(
    tmp_path: Path, source_runaway: int, expected: dict[str, int | None]
) -> None:
    cells = sr.read_cells(make_store(tmp_path, source_runaway))
    assert by_variant(cells, RUNAWAY) == expected
    assert set(by_variant(cells, FailureRule()).values()) == {None}


def test_outcomes_count_failed_unfinished_cells_but_not_open_ones(tmp_path: Path) -> None:
    cells = sr.read_cells(make_store(tmp_path, 30))
    result = outcomes(cells, failure_steps(cells, RUNAWAY))
    assert (result["paper-code"].seeds, result["paper-code"].failed) == (1, 1)
    assert result["paper-code"].steps == (30,)
    assert (result["acc-fp32"].seeds, result["acc-fp32"].unfinished) == (0, 1)  # no outcome
    cut_after_failing = {c.path: (25 if c.variant == "acc-fp32" else None) for c in cells}
    counted = outcomes(cells, cut_after_failing)["acc-fp32"]
    assert (counted.seeds, counted.failed, counted.unfinished) == (1, 1, 0)


def test_a_horizon_drops_later_failures_and_counts_runs_that_reached_it(tmp_path: Path) -> None:
    records = [stats(10, l0=[5.0]), stats(30, l0=[500.0])]
    assert dataclasses.replace(RUNAWAY, horizon=31).step(None, records) == 30
    assert dataclasses.replace(RUNAWAY, horizon=29).step(None, records) is None
    diverged = {"diverged": True, "diverged_step": 25}
    assert dataclasses.replace(FailureRule(), horizon=24).step(diverged, ()) is None
    assert "within its first 24 steps" in dataclasses.replace(FailureRule(), horizon=24).describe()

    # paper-code runs away at 30; fa2 (branched) at 30; acc-fp32 is cut off after step 20
    cells = sr.read_cells(make_store(tmp_path, 30))
    for horizon, expected in [
        (20, {"paper-code": (1, 0), "fa2": (1, 0), "acc-fp32": (1, 0)}),  # all reached 20
        (21, {"paper-code": (1, 0), "fa2": (1, 0), "acc-fp32": (1, 0)}),  # 21 steps trained
        (30, {"paper-code": (1, 0), "fa2": (1, 0), "acc-fp32": (0, 0)}),  # 30 is step 31
        (31, {"paper-code": (1, 1), "fa2": (1, 1), "acc-fp32": (0, 0)}),
        (41, {"paper-code": (1, 1), "fa2": (1, 1), "acc-fp32": (0, 0)}),  # short, but failed
    ]:
        rule = dataclasses.replace(RUNAWAY, horizon=horizon)
        failed_at = failure_steps(cells, rule)
        result = outcomes(cells, failed_at, counted(cells, failed_at, rule))
        assert {v: (o.seeds, o.failed) for v, o in result.items()} == expected, horizon


def test_a_finished_run_short_of_the_horizon_has_no_outcome_there(tmp_path: Path) -> None:
    cells = sr.read_cells(make_store(tmp_path, 30))
    rule = dataclasses.replace(FailureRule(), horizon=41)  # divergence: nobody failed
    failed_at = failure_steps(cells, rule)
    assert counted(cells, failed_at, rule) == set()
    assert counted(cells, failed_at, FailureRule()) == {c.path for c in cells if c.finished}
    assert [steps_trained(c) for c in cells if not c.finished] == [21]  # last logged step 20
    assert {steps_trained(c) for c in cells if c.finished} == {40}  # the summary's steps_done


@pytest.mark.parametrize("horizon", [0, -5, True, 2.5, "10"])
def test_bad_horizons_are_one_line_errors(horizon: Any) -> None:
    with pytest.raises(FlashprobeError, match=r"failure\.horizon must be a step count"):
        FailureRule.from_suite({"horizon": horizon})


def test_a_branched_cells_source_may_come_from_outside_the_counted_cells(tmp_path: Path) -> None:
    """The report counts one run per seed; a counted branched cell's source may be superseded."""
    cells = sr.read_cells(make_store(tmp_path, 10))
    fa2 = [c for c in cells if c.variant == "fa2"]
    assert by_variant(fa2, RUNAWAY) == {"fa2": 30}  # its own records only
    assert failure_steps(fa2, RUNAWAY, sources=cells) == {fa2[0].path: 10}


def test_a_run_cut_after_it_diverged_failed_at_its_recorded_divergence(tmp_path: Path) -> None:
    """No summary (divergence.stop false, cut later): the metrics' divergence is its outcome,
    under either event, as digest-report counts it."""
    cells = sr.read_cells(make_store(tmp_path, 30))
    cut = next(c for c in cells if c.variant == "acc-fp32")  # cut at step 30, no summary
    rows = [json.loads(line) for line in (cut.run_dir / "metrics.jsonl").read_text().splitlines()]
    rows[0]["divergence"] = {"step": 20, "rule": "rise", "detail": "loss 9 vs running min 1"}
    (cut.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for rule in (FailureRule(), RUNAWAY):
        failed_at = failure_steps(cells, rule)
        assert failed_at[cut.path] == 20, rule.event
        assert cut.path in counted(cells, failed_at, rule)
    assert outcomes(cells, failure_steps(cells, FailureRule()))["acc-fp32"].failed == 1


def test_a_horizon_of_n_steps_is_steps_0_to_n_minus_1() -> None:
    """0-based steps: a run of N steps never reaches step N, so a failure there is past a
    horizon of N (else the same seed's outcome would hang on which run was counted)."""
    for rule in (FailureRule(horizon=40), dataclasses.replace(RUNAWAY, horizon=40)):
        assert rule.step({"diverged": True, "diverged_step": 40}, ()) is None
        assert rule.step({"diverged": True, "diverged_step": 39}, ()) == 39
    assert dataclasses.replace(RUNAWAY, horizon=40).step(None, [stats(40, l0=[500.0])]) is None
