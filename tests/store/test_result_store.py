from __future__ import annotations

import dataclasses

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.suite import expand_suite

RAW = {
    "name": "demo",
    "seeds": [0],
    "base": {"train": {"steps": 4}},
    "variants": {"baseline": {}, "delta-fp32": {"kernel": {"delta_source": "o_fp32"}}},
}


def test_open_finish_and_read_back(tmp_path) -> None:
    store = ResultStore(tmp_path)
    cells = expand_suite(RAW).cells
    path = store.open_cell(cells[0], "v1", {"gpu": None})
    assert not store.is_finished(cells[0], "v1")
    store.finish(path, {"diverged": False, "final_loss": 1.5})
    assert store.is_finished(cells[0], "v1")
    assert not store.is_finished(cells[0], "v2")  # new code version: a new cell
    store.open_cell(cells[1], "v1", {"gpu": None})
    records = list(store.records())
    assert [r.meta["variant"] for r in records] == ["baseline", "delta-fp32"]
    assert records[0].finished and not records[1].finished
    assert records[0].config["train"]["steps"] == 4
    assert records[1].path.parent == tmp_path / "demo"
    assert records[1].path.name.startswith("delta-fp32--")  # the name verbatim: injective


def test_missing_and_corrupt_store(tmp_path) -> None:
    with pytest.raises(FlashprobeError, match="not found"):
        list(ResultStore(tmp_path / "none").records())
    store = ResultStore(tmp_path)
    cell = expand_suite(RAW).cells[0]
    path = store.open_cell(cell, "v1", {})
    (path / "config.json").write_text("{not json")
    with pytest.raises(FlashprobeError, match="corrupt JSON"):
        list(store.records())


def test_interrupted_cells_and_reset(tmp_path) -> None:
    store = ResultStore(tmp_path)
    cell = expand_suite(RAW).cells[0]
    path = store.open_cell(cell, "v1", {"gpu": "first"}, extra={"source_key": None})
    assert not store.is_interrupted(cell, "v1")
    (path / "run").mkdir()
    (path / "run" / "metrics.jsonl").write_text('{"step": 0}\n')
    assert store.is_interrupted(cell, "v1") and not store.is_finished(cell, "v1")
    store.open_cell(cell, "v1", {"gpu": "second"})  # a resume keeps the first environment
    record = next(store.records())
    assert record.run_dir == path / "run" and record.capture_files() == []
    assert (path / "environment.json").read_text().count("first") == 1
    store.reset(path)
    assert not (path / "run").exists() and not store.is_interrupted(cell, "v1")


def test_cells_never_land_outside_the_store(tmp_path) -> None:
    store = ResultStore(tmp_path / "store")
    cell = expand_suite(RAW).cells[0]
    (tmp_path / "store").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "store" / "demo").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FlashprobeError, match="outside the store"):
        store.open_cell(cell, "v1", {})
    assert list((tmp_path / "elsewhere").iterdir()) == []
    forged = dataclasses.replace(cell, suite="../escape")  # past validation: still refused
    with pytest.raises(FlashprobeError, match="suite name"):
        store.cell_dir(forged, "v1")
    for name in ("../x", "/abs", "", ".", ".."):
        with pytest.raises(FlashprobeError, match="--suite"):
            list(store.records(name))


def test_a_run_folder_linked_out_of_the_store_is_refused(tmp_path) -> None:
    store = ResultStore(tmp_path / "store")
    cell = expand_suite(RAW).cells[0]
    path = store.cell_dir(cell, "v1")
    path.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (path / "run").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FlashprobeError, match="outside the store"):
        store.open_cell(cell, "v1", {})
    assert list((tmp_path / "elsewhere").iterdir()) == []
