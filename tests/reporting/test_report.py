"""`build_reports` / `render_reports` on the planted synthetic store of test_replay."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from flashprobe.experiments import store_reader as sr
from flashprobe.experiments.replay import ReplaySettings, replay_cells
from flashprobe.reporting.report import build_reports, render_reports

# The synthetic store builder lives with the replay tests (test dirs are not packages).
_spec = importlib.util.spec_from_file_location(
    "replay_fixtures", Path(__file__).parents[1] / "experiments" / "test_replay.py"
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
    assert "1 of 6 cells unfinished" in joined
    assert "no replay results" in joined
    by = {r["variant"]: r for r in report.ranking}
    assert by["block-m"]["seeds"] == 1 and by["block-m"]["unfinished"] == 1
    assert "Missing" in render_reports([report], "table")
