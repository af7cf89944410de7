"""Reading a result store: helpers over metrics records."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.store import reader as sr
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.suite import expand_suite
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


RAW = {
    "name": "demo",
    "seeds": [0],
    "base": {"train": {"steps": 6}},
    "variants": {"fa2": {}},
}


def cell_with(root: Path, lines: list[str], summary: dict | None, config: dict | None = None):
    """A store with one cell whose metrics.jsonl holds `lines` (and summary.json `summary`)."""
    store = ResultStore(root)
    cell = expand_suite(RAW).cells[0]
    if config is not None:
        cell = dataclasses.replace(cell, config=config)
    path = store.open_cell(cell, "v1", {})
    (path / "run").mkdir()
    (path / "run" / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    if summary is not None:
        meta = json.loads((path / "cell.json").read_text())
        store.finish(path, {"status": "done", "variant": "fa2", "key": meta["key"], **summary})
    (view,) = sr.read_cells(root)
    return view


def steps(*numbers: int) -> list[str]:
    return [json.dumps({"step": s, "loss": 5.0}) for s in numbers]


def test_a_consistent_cell_has_no_problems(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2, 3, 4, 5), {"steps_done": 6, "final_loss": 1.0})
    assert view.problems == () and sr.metrics_problems(view) == []
    assert sr.store_notes([view]) == []


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
    problems = sr.metrics_problems(cell_with(tmp_path, lines, summary))
    if needle is None:
        assert problems == []
    else:
        assert len(problems) == 1 and needle in problems[0], problems


def test_log_every_and_branch_step_set_the_expected_steps(tmp_path) -> None:
    config = {"train": {"steps": 6}, "metrics": {"log_every": 2}}
    view = cell_with(tmp_path / "a", steps(1, 3, 5), {"steps_done": 6}, config)
    assert sr.metrics_problems(view) == []
    view = cell_with(tmp_path / "b", steps(1, 5), {"steps_done": 6}, config)
    assert "1 step missing (3)" in sr.metrics_problems(view)[0]


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
    (note,) = sr.store_notes([view])
    assert note.startswith(f"store check: {view.name}: ") and needle in note


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
    assert "1 corrupt line (3)" in sr.metrics_problems(view)[0]
    for record in sr.read_metrics(view):
        sr.attention_maxima(record)


def test_a_summary_claiming_a_huge_run_is_counted_not_listed(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2), {"steps_done": 10**30})
    (problem,) = sr.metrics_problems(view)
    assert problem == f"run/metrics.jsonl: {10**30 - 3} steps missing (first: 3, 4, 5 ...)"


def test_a_folder_without_cell_json_is_named_not_skipped_in_silence(tmp_path) -> None:
    view = cell_with(tmp_path, steps(0, 1, 2, 3, 4, 5), {"steps_done": 6, "final_loss": 1.0})
    lost = view.path.parent / "sfa--0123"
    (lost / "run").mkdir(parents=True)
    (view.path.parent / "logs").mkdir()  # ablate --jobs's shard logs: not a cell
    assert [c.name for c in sr.read_cells(tmp_path)] == [view.name]
    assert sr.unread_notes([view]) == [f"store check: {lost}: no cell.json, so not read as a cell"]


RECORD = {"variant": "fa2", "layer": 0, "head": 0, "step": 3, "rows": 8, "delta_sum": 0.5,
          "o_mean": 0.1, "dq_rel": 0.2, "matches_capture": True,
          "softmax_sum_bias_tied": None}  # fmt: skip
SERIES = {"variant": "fa2", "layer": 0, "head": 0, "steps": [3], "delta_cumsum": [0.5],
          "delta_coherence": None}  # fmt: skip
CELL_REPLAY = {"format": "flashprobe-replay/1", "source_cell": "fa2--0", "backend": "emulator",
               "steps": [3], "layers": [0], "notes": ["n"], "records": [RECORD],
               "series": [SERIES], "seed": 0, "point": []}  # fmt: skip
SUITE_REPLAY = {"format": "flashprobe-replay/1", "variants": ["fa2"], "sources": ["fa2--0"],
                "roles": {"baseline": "fa2", "safe": None, "components": {}, "notes": []},
                "summary": {"fa2": {"delta_bias": 0.1}}, "untrained_variants": {},
                "notes": []}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (("records",), 5, "records is int"),
        (("records",), None, "records is NoneType"),
        (("records", 0), "x", "records[0] is str"),
        (("records", 0, "variant"), None, "records[0].variant is NoneType"),
        (("records", 0, "layer"), "1", "records[0].layer is str"),
        (("records", 0, "rows"), [1], "records[0].rows is list"),
        (("records", 0, "dq_rel"), "x", "records[0].dq_rel is str"),
        (("series", 0), [], "series[0] is list"),
        (("series", 0, "head"), 1.5, "series[0].head is float"),
        (("series", 0, "delta_cumsum"), ["x"], "series[0].delta_cumsum holds str"),
        (("notes",), 5, "notes is int"),
        (("notes",), [5], "notes holds int"),
        (("steps",), ["x"], "steps holds str"),
        (("source_cell",), [], "source_cell is list"),
    ],
)
def test_a_cell_replay_of_the_wrong_shape_is_one_line(tmp_path, path, value, needle) -> None:
    # A hand-edited or foreign replay.json: a one-line error naming the file and the field,
    # not a TypeError deep in the report.
    view = cell_with(tmp_path, steps(0, 1), None)
    assert _replay_round_trip(view.replay_path, CELL_REPLAY) == CELL_REPLAY
    _write_changed(view.replay_path, CELL_REPLAY, path, value)
    with pytest.raises(FlashprobeError, match=r"corrupt replay results: .*replay\.json: "):
        sr.read_replay(view)
    with pytest.raises(FlashprobeError) as error:
        sr.read_replay(view)
    assert needle in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (("roles",), 5, "roles is int"),
        (("roles", "baseline"), 5, "roles.baseline is int"),
        (("roles", "components"), [], "roles.components is list"),
        (("variants",), 5, "variants is int"),
        (("variants",), [None], "variants holds NoneType"),
        (("summary",), [], "summary is list"),
        (("summary", "fa2"), 5, "summary.fa2 is int"),
        (("untrained_variants",), 5, "untrained_variants is int"),
    ],
)
def test_a_suite_replay_of_the_wrong_shape_is_one_line(tmp_path, path, value, needle) -> None:
    folder = tmp_path / "suite"
    folder.mkdir()
    assert _replay_round_trip(folder / "replay.json", SUITE_REPLAY) == SUITE_REPLAY
    assert sr.read_suite_replay(folder) == SUITE_REPLAY
    _write_changed(folder / "replay.json", SUITE_REPLAY, path, value)
    with pytest.raises(FlashprobeError) as error:
        sr.read_suite_replay(folder)
    assert "corrupt replay results" in str(error.value) and needle in str(error.value)


def _replay_round_trip(path: Path, doc: dict) -> dict:
    path.write_text(json.dumps(doc))
    return sr._read_replay_file(path)


def _write_changed(path: Path, doc: dict, where: tuple, value) -> None:
    changed = json.loads(json.dumps(doc))
    node = changed
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    path.write_text(json.dumps(changed))


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
