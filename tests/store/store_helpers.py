"""A one-cell result store for the store tests: its metrics.jsonl lines and summary.json given."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from flashprobe.store import reader as sr
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.suite import expand_suite

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
        done = {"status": "done", "variant": "fa2", "key": meta["key"], "diverged": False}
        store.finish(path, {**done, **summary})
    (view,) = sr.read_cells(root)
    return view


def steps(*numbers: int) -> list[str]:
    return [json.dumps({"step": s, "loss": 5.0}) for s in numbers]
