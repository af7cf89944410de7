"""Replay results on disk: a replay.json not of the shape attribution.replay writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from store_helpers import cell_with, steps

from flashprobe.errors import FlashprobeError
from flashprobe.store.replay_results import _read_replay_file, read_replay, read_suite_replay

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
        read_replay(view)
    with pytest.raises(FlashprobeError) as error:
        read_replay(view)
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
    assert read_suite_replay(folder) == SUITE_REPLAY
    _write_changed(folder / "replay.json", SUITE_REPLAY, path, value)
    with pytest.raises(FlashprobeError) as error:
        read_suite_replay(folder)
    assert "corrupt replay results" in str(error.value) and needle in str(error.value)


def _replay_round_trip(path: Path, doc: dict) -> dict:
    path.write_text(json.dumps(doc))
    return _read_replay_file(path)


def _write_changed(path: Path, doc: dict, where: tuple, value) -> None:
    changed = json.loads(json.dumps(doc))
    node = changed
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    path.write_text(json.dumps(changed))


def test_an_empty_replay_is_corrupt_as_a_wrong_typed_one(tmp_path) -> None:
    """`{}` (or a file without a field every replay.json has) used to read as a replay with no
    records: the report then ranked without the baseline's mechanism, without a word."""
    view = cell_with(tmp_path, steps(0, 1), None)
    folder = view.path.parent
    for path, doc, read, needle in (
        (view.replay_path, CELL_REPLAY, lambda: read_replay(view), "records"),
        (folder / "replay.json", SUITE_REPLAY, lambda: read_suite_replay(folder), "summary"),
    ):
        path.write_text("{}")
        with pytest.raises(FlashprobeError, match=r"corrupt replay results: .*: no format"):
            read()
        path.write_text(json.dumps({k: v for k, v in doc.items() if k != needle}))
        with pytest.raises(FlashprobeError, match=f"no {needle}$"):
            read()
        path.unlink()
