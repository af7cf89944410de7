"""Reading a result store: cells, their metrics records and a cut run's record."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from store_helpers import cell_with, steps

from flashprobe.errors import FlashprobeError
from flashprobe.store import reader as sr
from flashprobe.store.metrics_check import metrics_problems, store_notes
from flashprobe.train.run_state import INTERRUPTED


def test_attention_maxima_take_the_largest_over_layers_and_heads() -> None:
    record = {
        "attention": {
            "0": {"max_logit": [3.0, None], "key_shift_leak": [0.01, 0.02]},
            "1": {"max_logit": [7.5, 1.0], "tie_events": [None, None]},
        }
    }
    assert sr.attention_maxima(record) == {"max_logit": 7.5, "key_shift_leak": 0.02}
    assert sr.attention_maxima(record, ["tie_events"]) == {}  # measured by no head
    assert sr.attention_maxima({"step": 3}) == {}


def test_a_nan_summary_is_strict_json_and_reads_back_as_nan(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2, 3, 4, 5), {"steps_done": 6, "final_loss": math.nan})
    text = (view.path / "summary.json").read_text()
    raw = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    assert raw["final_loss"] is None and raw["_nonfinite"] == {"/final_loss": "NaN"}
    assert math.isnan(view.summary["final_loss"]) and view.problems == ()


def test_old_non_strict_files_still_read(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2, 3, 4, 5), {"steps_done": 6})
    path = view.path / "summary.json"
    path.write_text(path.read_text().replace('"steps_done": 6', '"steps_done": 6, "min_loss": NaN'))
    (again,) = sr.read_cells(tmp_path)
    assert math.isnan(again.summary["min_loss"])


@pytest.mark.parametrize(
    "bad",
    [
        {"step": 2, "attention": 5},
        {"step": 2, "attention": {"x": {"max_logit": [1.0]}}},
        {"step": 2, "attention": {"1": {"max_logit": "high"}}},
        {"step": 2, "loss": "low"},
        {"step": 2, "spectral": [1]},
        {"step": True},
    ],
)
def test_a_record_of_the_wrong_shape_is_a_corrupt_line_not_a_crash(tmp_path, bad) -> None:
    lines = [*steps(0, 1), json.dumps(bad), *steps(3, 4, 5)]
    view = cell_with(tmp_path, lines, {"steps_done": 6})
    assert [r["step"] for r in sr.read_metrics(view)] == [0, 1, 3, 4, 5]
    assert "1 corrupt line (3)" in metrics_problems(view)[0]
    for record in sr.read_metrics(view):
        sr.attention_maxima(record)


def test_a_null_seed_in_cell_json_reads_as_absent(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1), None)
    view = dataclasses.replace(view, meta={**view.meta, "seed": None, "variant": None})
    assert view.seed == 0
    assert view.variant == view.path.name.split("--")[0]


def test_a_cut_run_record_is_read_for_an_unfinished_cell_only(tmp_path) -> None:
    record = {"steps_done": 2, "wall_time_s": 3.5, "time_by_phase_s": {"train": 3.0, "other": 0.5}}
    cut = cell_with(tmp_path / "cut", steps(0, 1), None)
    assert sr.read_interrupted(cut) is None  # killed outright: no record
    (cut.run_dir / INTERRUPTED).write_text(json.dumps(record))
    assert sr.read_interrupted(cut) == record and not cut.finished
    done = cell_with(tmp_path / "done", steps(0, 1, 2, 3, 4, 5), {"steps_done": 6})
    (done.run_dir / INTERRUPTED).write_text(json.dumps(record))  # left by an earlier cut
    assert sr.read_interrupted(done) is None


@pytest.mark.parametrize(
    "text",
    [
        "{torn",
        "[1, 2]",
        '{"steps_done": "2", "wall_time_s": 1.0, "time_by_phase_s": {}}',
        '{"steps_done": 2, "wall_time_s": true, "time_by_phase_s": {}}',
        '{"steps_done": 2, "wall_time_s": 1.0, "time_by_phase_s": {"train": "1"}}',
        '{"steps_done": 2, "wall_time_s": 1.0}',
    ],
)
def test_a_cut_run_record_of_the_wrong_shape_reads_as_none(tmp_path, text) -> None:
    cut = cell_with(tmp_path, steps(0, 1), None)
    (cut.run_dir / INTERRUPTED).write_text(text)
    assert sr.read_interrupted(cut) is None


@pytest.mark.parametrize("suite", [None, "smoke"])
def test_a_missing_store_is_named_as_missing_even_with_a_suite(tmp_path, suite) -> None:
    """`replay nonexist --suite smoke` used to say "no suite 'smoke' in result store nonexist"."""
    with pytest.raises(FlashprobeError, match=r"^result store not found: .*nonexist$"):
        sr.read_cells(tmp_path / "nonexist", suite)


def test_an_empty_or_negative_summary_goes_through_the_store_check(tmp_path) -> None:
    """summary.json `{}` marks the cell finished but says nothing of its outcome: a note, as a
    value of the wrong type gets (report and digest list it), not a silent success."""
    view = cell_with(tmp_path / "a", steps(0, 1), {})
    (view.path / "summary.json").write_text("{}")
    (view,) = sr.read_cells(tmp_path / "a")
    assert view.problems == ("summary.json lacks steps_done, diverged (read as missing)",)
    assert any("lacks steps_done" in n for n in store_notes([view]))
    view = cell_with(tmp_path / "b", steps(0, 1), {"steps_done": -5})
    assert view.summary["steps_done"] is None
    assert view.problems == ("summary.json steps_done -5 is negative (read as missing)",)
