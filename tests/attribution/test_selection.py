"""One run per (variant, point, seed): longer horizons, then later runs, supersede the others."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from flashprobe.attribution.selection import one_run_per_seed
from flashprobe.store import reader as sr
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.cell_config import horizon, normalise_cell_config
from flashprobe.suites.suite import cell_key, deep_merge, expand_suite

SUITE: dict[str, Any] = {
    "name": "horizon",
    "seeds": [0, 1],
    "base": {
        "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
        "train": {"steps": 40, "batch_size": 2, "device": "cpu"},
        "kernel": {"preset": "paper-code"},
    },
    "variants": {"paper-code": {}, "l-fp32": {"kernel": {"l_accumulator": "fp32"}}},
}


def add_runs(
    root: Path,
    code: str = "v1",
    started: float = 1.0,
    runaway: dict[str, int] | None = None,
    only: str | None = None,
    finished: bool = True,
    **changes: Any,
) -> list[Path]:
    """Every cell of SUITE (deep-merged with `changes`; `only`: of this variant), finished (or
    cut short, without a summary), under code version `code`,
    started at file time `started`, logging the layer-0 max logit every 10 steps: 50, or 500
    from the step `runaway` gives for the variant."""
    store = ResultStore(root)
    suite = deep_merge(json.loads(json.dumps(SUITE)), changes)
    paths = []
    for cell in expand_suite(suite, validate=normalise_cell_config).cells:
        if only is not None and cell.variant != only:
            continue
        path = store.open_cell(cell, code, {"device": "cpu"})
        steps = cell.config["train"]["steps"]
        start = (runaway or {}).get(cell.variant, steps)
        rows = [
            {"step": s, "attention": {"0": {"max_logit": [500.0 if s >= start else 50.0]}}}
            for s in range(0, steps, 10)
        ]
        (path / "run").mkdir()
        (path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if finished:  # else a run cut short: no summary
            store.finish(path, {"diverged": False, "diverged_step": None, "steps_done": steps})
        for name in ("environment.json", "cell.json"):
            os.utime(path / name, (started, started))
        assert path.name.endswith(cell_key(cell, code))
        paths.append(path)
    return paths


def test_a_longer_horizon_supersedes_a_shorter_one_whatever_ran_last(tmp_path: Path) -> None:
    longer = add_runs(tmp_path, started=1.0, base={"train": {"steps": 60}}, variants={})
    add_runs(tmp_path, started=2.0)  # the 40-step suite, run after the 60-step one
    counted, superseded = one_run_per_seed(sr.read_cells(tmp_path))
    assert sorted(c.path for c in counted) == sorted(longer)
    assert {horizon(c.config) for c in counted} == {60}
    assert len(superseded) == 4
    assert {s.differs for s in superseded} == {"train.steps=40"}
    assert all(s.by.variant == s.cell.variant and s.by.seed == s.cell.seed for s in superseded)


def test_a_finished_run_is_counted_before_a_longer_one_cut_short(tmp_path: Path) -> None:
    finished = add_runs(tmp_path, started=1.0)
    add_runs(tmp_path, started=2.0, finished=False, base={"train": {"steps": 60}}, variants={})
    counted, superseded = one_run_per_seed(sr.read_cells(tmp_path))
    assert sorted(c.path for c in counted) == sorted(finished)
    assert {s.differs for s in superseded} == {"train.steps=60"}


def test_the_latest_run_of_the_same_horizon_is_counted(tmp_path: Path) -> None:
    add_runs(tmp_path, code="v1", started=5.0)
    newer = add_runs(tmp_path, code="v2", started=9.0)
    counted, superseded = one_run_per_seed(sr.read_cells(tmp_path))
    assert sorted(c.path for c in counted) == sorted(newer)
    assert {s.differs for s in superseded} == {"code v1"}
    assert "counted: " in superseded[0].describe()


def test_a_single_run_per_seed_is_left_alone(tmp_path: Path) -> None:
    paths = add_runs(tmp_path)
    counted, superseded = one_run_per_seed(sr.read_cells(tmp_path))
    assert sorted(c.path for c in counted) == sorted(paths) and superseded == []


def test_a_longer_rerun_cut_after_it_diverged_is_counted_before_the_finished_one(
    tmp_path: Path,
) -> None:
    """A cut run that diverged has an outcome (attribution.failure): its longer plan counts."""
    add_runs(tmp_path, started=1.0)
    longer = add_runs(
        tmp_path, started=2.0, finished=False, base={"train": {"steps": 60}}, variants={}
    )
    for path in longer:
        with (path / "run" / "metrics.jsonl").open("a") as log:
            log.write(json.dumps({"step": 45, "divergence": {"step": 45, "rule": "rise"}}) + "\n")
    counted, superseded = one_run_per_seed(sr.read_cells(tmp_path))
    assert sorted(c.path for c in counted) == sorted(longer)
    assert {s.differs for s in superseded} == {"train.steps=40"}
