"""Run a cell on from a finished, shorter run of itself instead of from step 0.

Rerunning a suite with a longer horizon (`--set train.steps=3500` after 2,500 steps) makes new
cells: the horizon is part of a cell's key. When the store holds a finished run of the same cell
(variant, grid point, seed and code version, every config key but train.steps equal) that reached
its own horizon, the new cell starts from a copy of that run's training output and resumes from
its final checkpoint. That is the run from scratch, step for step: the learning rate, the data
order and the per-step seeds are functions of the step, and a checkpoint holds the weights, the
optimizer and the divergence monitor (tests/runner/test_extension.py compares the two bit
for bit). A run is extended only where this holds:

* the schedule does not depend on train.steps (constant, or cosine with decay_steps set);
* a branched cell's shorter run branched at the same step from a source run whose config is
  the new source's but for train.steps (and whose schedule does not depend on it either), so
  the checkpoint it started from is the one the new source writes at that step.

(Capture steps are equal in the two configs, and every one lies before the shorter horizon,
which validation checks, so both runs capture the same steps at the same byte share.)

The copy's metrics keep the shorter run's final evaluation: one more val_loss record, at its
last step, than a run from scratch logs when that step is off the eval cadence. Checkpoint and
capture files are hard links where the file system allows (they are never rewritten in place);
everything else is copied.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe.store.result_store import RUN_DIR, CellRecord, ResultStore
from flashprobe.suites.cell_config import horizon
from flashprobe.suites.suite import Cell
from flashprobe.train.checkpoint import CHECKPOINT_DIR, checkpoint_step, latest_checkpoint

#: Files under these run/ subfolders are written once (temp file and rename): safe to share.
SHARED_DIRS = (CHECKPOINT_DIR, "captures")


@dataclass(frozen=True)
class Extension:
    """The finished shorter run a cell continues, and the checkpoint step it resumes from."""

    path: Path  # the shorter run's cell folder
    key: str
    steps: int  # its horizon (train.steps)
    checkpoint_step: int


class ExtensionIndex:
    """The finished runs of one suite in a store, looked up by cell."""

    def __init__(self, store: ResultStore, suite: str, version: str) -> None:
        self.version = version
        self.records: list[CellRecord] = []
        if (store.root / suite).is_dir():
            self.records = [r for r in store.records(suite) if r.summary is not None]
        self.by_key = {r.meta.get("key"): r for r in self.records}

    def find(self, cell: Cell) -> Extension | None:
        """The longest finished run this cell can continue (None: train from step 0)."""
        if not horizon_free(cell.config):
            return None
        if cell.branch_from is not None and not horizon_free(cell.source_config or {}):
            return None
        steps = horizon(cell.config)
        best = None
        for record in self.records:
            meta = record.meta
            if (
                meta.get("variant") != cell.variant
                or meta.get("seed") != cell.seed
                or meta.get("point") != [list(p) for p in cell.point]
                or meta.get("code_version") != self.version
                or meta.get("branch_from") != cell.branch_from
                or meta.get("branch_step") != cell.branch_step
            ):
                continue
            theirs = horizon(record.config)
            if not (theirs < steps and _same_but_steps(record.config, cell.config)):
                continue
            if cell.branch_from is not None and not self._same_source(record, cell):
                continue
            if (record.summary or {}).get("steps_done") != theirs:
                continue  # stopped early (divergence rule): a longer horizon changes nothing
            found = latest_checkpoint(record.path / RUN_DIR)
            if found is None or (best is not None and theirs <= best.steps):
                continue
            best = Extension(record.path, str(meta.get("key")), theirs, checkpoint_step(found))
        return best

    def _same_source(self, record: CellRecord, cell: Cell) -> bool:
        """The shorter branched run's source ran the new source's config but for train.steps."""
        source = self.by_key.get(record.meta.get("source_key"))
        return source is not None and _same_but_steps(source.config, cell.source_config or {})


def copy_run(source: Path, target: Path) -> None:
    """Copy a cell's run/ folder into an empty (or absent) one: checkpoints and captures as
    hard links where possible, the rest (metrics, which grow) as copies."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.rglob("*")):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(exist_ok=True)
        elif path.relative_to(source).parts[0] in SHARED_DIRS:
            try:
                os.link(path, dest)
            except OSError:
                shutil.copy2(path, dest)
        else:
            shutil.copy2(path, dest)


def horizon_free(config: Mapping[str, Any]) -> bool:
    """True when the learning rate of every step is the same whatever train.steps is."""
    schedule = config.get("schedule") or {}
    return schedule.get("kind") == "constant" or schedule.get("decay_steps") is not None


def _same_but_steps(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def without_steps(config: Mapping[str, Any]) -> dict[str, Any]:
        return {**config, "train": {**(config.get("train") or {}), "steps": None}}

    return without_steps(a) == without_steps(b)
