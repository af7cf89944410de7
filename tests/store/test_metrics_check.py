"""Store checks: metrics.jsonl against summary.json, and the notes on inconsistent cells."""

from __future__ import annotations

import pytest
from store_helpers import cell_with, steps

from flashprobe.store import reader as sr
from flashprobe.store.metrics_check import metrics_problems, store_notes, unread_notes


def test_a_consistent_cell_has_no_problems(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2, 3, 4, 5), {"steps_done": 6, "final_loss": 1.0})
    assert view.problems == () and metrics_problems(view) == []
    assert store_notes([view]) == []


@pytest.mark.parametrize(
    ("lines", "summary", "needle"),
    [
        (steps(0, 1, 2, 2, 3, 4, 5), {"steps_done": 6}, "1 step logged twice (2)"),
        (steps(0, 1, 3, 4, 5), {"steps_done": 6}, "1 step missing (2)"),
        (steps(0, 1, 2), {"steps_done": 6}, "3 steps missing (3, 4, 5)"),
        ([], {"steps_done": 6}, "empty, but summary.json says 6 steps were done"),
        ([*steps(0, 1), "{torn", *steps(2, 3, 4, 5)], {"steps_done": 6}, "1 corrupt line (3)"),
        ([*steps(0, 1), '{"loss": 1}', *steps(2, 3, 4, 5)], {"steps_done": 6}, "corrupt line"),
        (steps(0, 2, 1, 3, 4, 5), {"steps_done": 6}, "steps out of order"),
        (steps(0, 1, 2, 3, 4, 5, 6, 7), {"steps_done": 6}, "steps past summary.json's"),
        (steps(0, 1), None, None),  # unfinished, as far as it went: fine
        ([*steps(0, 1), '{"step": 2, "lo'], None, None),  # a kill's torn last line: fine
    ],
)
def test_metrics_problems(tmp_path, lines, summary, needle) -> None:
    problems = metrics_problems(cell_with(tmp_path, lines, summary))
    if needle is None:
        assert problems == []
    else:
        assert len(problems) == 1 and needle in problems[0], problems


def test_log_every_and_branch_step_set_the_expected_steps(tmp_path) -> None:
    config = {"train": {"steps": 6}, "metrics": {"log_every": 2}}
    view = cell_with(tmp_path / "a", steps(1, 3, 5), {"steps_done": 6}, config)
    assert metrics_problems(view) == []
    view = cell_with(tmp_path / "b", steps(1, 5), {"steps_done": 6}, config)
    assert "1 step missing (3)" in metrics_problems(view)[0]


@pytest.mark.parametrize(
    ("summary", "needle"),
    [
        ({"final_loss": "NaN"}, "final_loss is str 'NaN' (read as missing)"),
        ({"steps_done": "6"}, "steps_done is str '6'"),
        ({"diverged": "yes", "diverged_step": 2}, "diverged is str"),
        ({"variant": "sfa"}, "summary.json variant 'sfa' contradicts cell.json 'fa2'"),
        ({"key": "0000"}, "summary.json key '0000' contradicts"),
        ({"diverged": True, "diverged_step": None}, "says diverged but gives no diverged_step"),
        ({"diverged": True, "diverged_step": 9}, "diverged_step 9 is outside its 6 steps"),
    ],
)
def test_summary_problems_are_found_and_bad_values_read_as_missing(
    tmp_path, summary, needle
) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2, 3, 4, 5), {"steps_done": 6, **summary})
    assert any(needle in p for p in view.problems), view.problems
    for key, value in summary.items():
        stored = view.summary[key]
        assert stored is None or stored == value or key in ("variant", "key")
    (note,) = store_notes([view])
    assert note.startswith(f"store check: {view.name}: ") and needle in note


def test_a_summary_claiming_a_huge_run_is_counted_not_listed(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2), {"steps_done": 10**30})
    (problem,) = metrics_problems(view)
    assert problem == f"run/metrics.jsonl: {10**30 - 3} steps missing (first: 3, 4, 5 ...)"


def test_a_folder_without_cell_json_is_named_not_skipped_in_silence(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2, 3, 4, 5), {"steps_done": 6, "final_loss": 1.0})
    lost = view.path.parent / "sfa--0123"
    (lost / "run").mkdir(parents=True)
    (view.path.parent / "logs").mkdir()  # ablate --jobs's shard logs: not a cell
    assert [c.name for c in sr.read_cells(tmp_path)] == [view.name]
    assert unread_notes([view]) == [f"store check: {lost}: no cell.json, so not read as a cell"]
