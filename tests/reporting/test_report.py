"""`build_reports` / `render_reports` on the planted synthetic store of test_replay."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from flashprobe.attribution.failure import FailureRule
from flashprobe.attribution.replay import replay_cells
from flashprobe.attribution.replay_settings import ReplaySettings
from flashprobe.reporting.report import build_reports
from flashprobe.reporting.report_tables import render_reports
from flashprobe.store import reader as sr

# The synthetic store builder lives with the replay tests (test dirs are not packages).
_spec = importlib.util.spec_from_file_location(
    "replay_fixtures", Path(__file__).parents[1] / "attribution" / "test_replay.py"
)
fixtures = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fixtures)  # type: ignore[union-attr]


@pytest.fixture
def replayed(tmp_path) -> Path:
    root = fixtures.make_store(tmp_path)
    cells = sr.read_cells(root, "planted")
    replay_cells(cells, ReplaySettings(baseline="baseline"), kernel=fixtures.planted_kernel)
    return root


def test_report_ranks_the_planted_cause(replayed: Path) -> None:
    (report,) = build_reports(replayed)
    ranked = [r["variant"] for r in report.ranking if r["rank"] is not None]
    assert ranked == ["delta-fp32", "block-m"]
    assert report.roles.baseline == "baseline"
    assert {h["layer"] for h in report.hotspots} == {1} and len(report.hotspots) == 2
    assert report.missing == []
    text = render_reports([report], "table")
    assert "Ranking" in text and "Method: score" in text and "delta_source=o_fp32" in text
    md = render_reports([report], "markdown")
    assert "## Ranking" in md and "| rank" in md
    csv_text = render_reports([report], "csv", "metrics")
    assert csv_text.splitlines()[0].startswith("suite,variant,o_bias,delta_bias")
    doc = json.loads(render_reports([report], "json"))
    assert doc[0]["ranking"][0]["design"] == "baseline"


def test_partial_store_says_what_is_missing(tmp_path) -> None:
    root = fixtures.make_store(tmp_path, finished=False)
    (report,) = build_reports(root)
    joined = " ".join(report.missing)
    assert "1 of 6 cells unfinished: block-m seed 1 at step 3 (loss 2)" in joined  # where it was
    assert "no replay results" in joined
    by = {r["variant"]: r for r in report.ranking}
    assert by["block-m"]["seeds"] == 1 and by["block-m"]["unfinished"] == 1
    assert "Missing" in render_reports([report], "table")


_failure_spec = importlib.util.spec_from_file_location(
    "failure_fixtures", Path(__file__).parents[1] / "attribution" / "test_failure.py"
)
failure_fixtures = importlib.util.module_from_spec(_failure_spec)  # type: ignore[arg-type]
_failure_spec.loader.exec_module(failure_fixtures)  # type: ignore[union-attr]


def test_ranking_counts_the_suites_failure_rule(tmp_path: Path) -> None:
    root = failure_fixtures.make_store(tmp_path, 30)
    (plain,) = build_reports(root)  # no suite.json: divergence, and nothing diverged
    assert {r["variant"]: r["failed"] for r in plain.ranking} == dict.fromkeys(
        ("paper-code", "fa2", "acc-fp32"), 0
    )
    suite = {**failure_fixtures.SUITE, "failure": {"event": "logit-runaway", "logit_limit": 100}}
    (root / "runaway" / "suite.json").write_text(json.dumps(suite))
    (report,) = build_reports(root)
    by = {r["variant"]: r for r in report.ranking}
    assert report.roles.baseline == "paper-code"
    assert (by["paper-code"]["failed"], by["fa2"]["failed"]) == (1, 1)
    assert by["acc-fp32"]["seeds"] == 0 and by["acc-fp32"]["unfinished"] == 1
    assert report.notes[0].startswith("failed (ranking): the max attention logit")
    assert "logit runaway" in by["fa2"]["verdict"]
    text = render_reports([report], "table")
    assert "steps to fail" in text and "1/1" in text
    # the command line's rule wins over the suite's
    (again,) = build_reports(root, failure=failure_fixtures.FailureRule())
    assert {r["variant"]: r["failed"] for r in again.ranking}["paper-code"] == 0


_selection_spec = importlib.util.spec_from_file_location(
    "selection_fixtures", Path(__file__).parents[1] / "attribution" / "test_selection.py"
)
selection_fixtures = importlib.util.module_from_spec(_selection_spec)  # type: ignore[arg-type]
_selection_spec.loader.exec_module(selection_fixtures)  # type: ignore[union-attr]


def test_a_rerun_to_a_longer_horizon_counts_each_seed_once(tmp_path: Path) -> None:
    """The suite at 40 steps, then l-fp32 again to 60 steps, where it runs away at step 50."""
    selection_fixtures.add_runs(tmp_path, started=1.0)
    selection_fixtures.add_runs(
        tmp_path, started=2.0, runaway={"l-fp32": 50}, only="l-fp32", base={"train": {"steps": 60}}
    )
    suite = {**selection_fixtures.SUITE, "failure": {"event": "logit-runaway", "logit_limit": 100}}
    (tmp_path / "horizon" / "suite.json").write_text(json.dumps(suite))

    def counts(report) -> dict[str, tuple[int, int]]:
        return {r["variant"]: (r["failed"], r["seeds"]) for r in report.ranking}

    (report,) = build_reports(tmp_path)
    assert counts(report) == {"paper-code": (0, 2), "l-fp32": (2, 2)}  # not 2 of 4
    assert {r["variant"]: r["steps_done"] for r in report.summary}["l-fp32"] == "60,60"
    notes = " ".join(report.notes)
    assert "2 superseded run(s) not counted" in notes and "train.steps=40" in notes
    assert "40 steps: paper-code; 60 steps: l-fp32" in notes and "--horizon N" in notes

    (at_40,) = build_reports(tmp_path, horizon=40)  # the runaway at 50 is past it
    assert counts(at_40) == {"paper-code": (0, 2), "l-fp32": (0, 2)}
    assert "within its first 40 steps" in at_40.notes[0] and "different lengths" not in " ".join(
        at_40.notes
    )
    (at_60,) = build_reports(tmp_path, horizon=60)  # paper-code's runs never got there
    assert counts(at_60) == {"paper-code": (0, 0), "l-fp32": (2, 2)}
    assert "2 finished run(s) trained fewer than 60 steps" in " ".join(at_60.notes)


def test_a_run_that_did_not_fail_but_ran_away_in_its_gradient_norm_is_named(
    tmp_path: Path,
) -> None:
    root = failure_fixtures.make_store(tmp_path, 30)
    (fa2,) = [c for c in sr.read_cells(root) if c.variant == "fa2"]
    norms = [0.3] * 12 + [50.0]
    rows = [{"step": 20 + i, "loss": 1.0, "grad_norm": g} for i, g in enumerate(norms)]
    (fa2.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (report,) = build_reports(root)
    (note,) = [n for n in report.notes if "gradient norm ran away" in n]
    assert note.endswith("fa2 seed 0: gradient norm 50 at step 32, 167× its earlier median 0.3")
    assert "paper-code seed" not in note  # no gradient norms logged: nothing to say
    by = {row["variant"]: row for row in report.summary}
    assert by["fa2"]["ran_away"] == "32"  # beside the rule's count, in the summary too
    assert by["paper-code"]["ran_away"] is None
    # the summary's column sits beside its `diverged` count, the loss rule's: a ranking rule
    # that counts the runaway as a failure drops the note, not the column
    (counted,) = build_reports(root, failure=FailureRule("gradient-runaway"))
    assert not [n for n in counted.notes if "gradient norm ran away" in n]
    by = {row["variant"]: row for row in counted.summary}
    assert (by["fa2"]["diverged"], by["fa2"]["ran_away"]) == (0, "32")


def test_the_summary_shows_the_loss_minimum_beside_the_final_loss(tmp_path: Path) -> None:
    """A slow blow-up short of the rule shows as a final loss far above the minimum."""
    root = failure_fixtures.make_store(tmp_path, 30)
    losses = {"paper-code": (1.3, 0.75), "fa2": (0.7, 0.6)}  # (final, min)
    for cell in sr.read_cells(root):
        if cell.summary is not None:
            final, low = losses[cell.variant]
            summary = {**cell.summary, "final_loss": final, "min_loss": low}
            (cell.path / "summary.json").write_text(json.dumps(summary))
    (report,) = build_reports(root)
    shown = {row["variant"]: (row["final_loss"], row["min_loss"]) for row in report.summary}
    assert shown == {**losses, "acc-fp32": (None, None)}  # acc-fp32 was cut: no summary


def _record_data_digests(root: Path, digests: dict[tuple[str, int], str]) -> None:
    """Give these finished cells' summaries the data digest a run now records."""
    for cell in sr.read_cells(root):
        digest = digests.get((cell.variant, cell.seed))
        if digest is not None:
            summary = {**(cell.summary or {}), "environment": {"data_digest": digest}}
            (cell.path / "summary.json").write_text(json.dumps(summary))


def test_runs_trained_on_different_token_streams_are_noted(tmp_path: Path) -> None:
    root = fixtures.make_store(tmp_path)  # summaries without a data digest: unknown
    (report,) = build_reports(root)
    assert not [n for n in report.notes if "token streams" in n]
    old, new = "0123456789abcdef", "fedcba9876543210"
    _record_data_digests(root, {("baseline", 0): old, ("baseline", 1): old,
                                ("delta-fp32", 1): new})  # fmt: skip
    (report,) = build_reports(root)
    (note,) = [n for n in report.notes if "token streams" in n]
    assert note.endswith("0123456789ab: baseline seeds 0,1; fedcba987654: delta-fp32 seed 1")
    assert note in " ".join(render_reports([report], "table").split())  # the table wraps it


def test_an_empty_summary_is_a_store_check_and_an_empty_replay_an_error(replayed: Path) -> None:
    """summary.json `{}` counted as a finished run without a word (steps '4,None'); a baseline
    cell's replay.json `{}` dropped its mechanism from the ranking without a word."""
    from flashprobe.errors import FlashprobeError

    cells = sr.read_cells(replayed)
    plain = next(c for c in cells if c.variant == "block-m")
    (plain.path / "summary.json").write_text("{}")
    (report,) = build_reports(replayed)
    assert any(
        n.startswith(f"store check: {plain.name}: summary.json lacks steps_done, diverged")
        for n in report.notes
    )
    source = next(c for c in cells if c.variant == "baseline")
    source.replay_path.write_text("{}")
    with pytest.raises(FlashprobeError, match=f"corrupt replay results: {source.replay_path}: no"):
        build_reports(replayed)


def test_the_summary_gives_each_finished_runs_held_loss_rise(tmp_path: Path) -> None:
    """The loss rule's quantity as a number: how far the loss stood above its minimum for the
    rule's patience (one logged record here: the cells' defaults), from its min_step."""
    root = failure_fixtures.make_store(tmp_path, 30)
    curves = {"paper-code": [2.0, 1.0, 1.4, 1.2], "fa2": [1.0, 1.1]}  # fa2: branched at 20
    for cell in sr.read_cells(root):
        losses = curves.get(cell.variant, [1.0])
        start = 0 if cell.variant == "paper-code" else 20
        rows = [{"step": start + 10 * i, "loss": x} for i, x in enumerate(losses)]
        (cell.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (report,) = build_reports(root)
    by = {row["variant"]: row["loss_rise"] for row in report.summary}
    assert by == {"paper-code": "0.40", "fa2": "0.10", "acc-fp32": None}  # acc-fp32: cut
    (at_25,) = build_reports(root, horizon=25)  # steps 0-24: paper-code's 1.4 at 20 counts
    assert {row["variant"]: row["loss_rise"] for row in at_25.summary}["paper-code"] == "0.40"
    (at_15,) = build_reports(root, horizon=15)
    assert {row["variant"]: row["loss_rise"] for row in at_15.summary}["paper-code"] == "0.00"
