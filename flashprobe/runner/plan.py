"""Planning: what `flashprobe ablate` does with each cell of a suite (run, skip, resume, ...).

A cell = variant × grid point × seed; its key hashes its normalised config (and its branch
source's) with the code version (flashprobe version + git SHA), so changing either makes new
cells and finished cells are never rerun (action "skip").

Interrupted cells (run/ holds metrics, no summary): --resume continues each from its newest
intact checkpoint that its logs reach intact (train.checkpoint.resume_point: a damaged newer
checkpoint or log line is named in the run's summary line and summary.json's resume_notes; from
scratch, or from the branch source, when none is left); --restart deletes its training output
and starts it over; with neither the suite is refused before anything runs. A cell is written
by one process at a time (runner.cell_lock): one another process holds is planned "busy"
and left alone.
A new cell that is a finished cell run to a longer horizon (the same config but train.steps,
same code; a branched cell's from the same branch point) continues a copy of that run from its
final checkpoint (action "extend"; runner.extension says when that equals a run from
scratch).
Under torchrun every rank runs the same plan; only rank 0 writes the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from flashprobe import __version__
from flashprobe.environment import git_sha
from flashprobe.errors import FlashprobeError
from flashprobe.runner.cell_lock import lock_holder
from flashprobe.runner.extension import Extension, ExtensionIndex
from flashprobe.store.result_store import RUN_DIR, ResultStore
from flashprobe.suites.cell_config import CellSetup, resolve_cell_config
from flashprobe.suites.suite import Cell, Suite, cell_key
from flashprobe.train.checkpoint import resume_point

#: busy: another process holds the cell's lock (runner.cell_lock) as the suite is planned
Action = Literal["run", "skip", "resume", "restart", "extend", "busy"]


@dataclass(frozen=True)
class PlannedCell:
    """A cell, where it lives in the store and what the runner will do with it."""

    index: int  # position in the run order
    cell: Cell
    setup: CellSetup
    key: str
    path: Path
    action: Action
    source: int | None = None  # run-order index of the branch source
    checkpoint_step: int | None = None  # an interrupted or extended run's latest checkpoint
    extends: Extension | None = None  # the finished shorter run this cell continues
    holder: str | None = None  # action busy: who holds the cell's lock

    @property
    def run_dir(self) -> Path:
        return self.path / RUN_DIR

    @property
    def start_step(self) -> int:
        """The step the run itself starts at: its branch step, or 0."""
        return self.cell.branch_step or 0

    @property
    def first_step(self) -> int:
        """The step this invocation trains from (a resumed or extended run's checkpoint)."""
        if self.action in ("resume", "extend") and self.checkpoint_step is not None:
            return self.checkpoint_step
        return self.start_step

    @property
    def steps(self) -> int:
        return self.setup.train.train.steps


def code_version() -> str:
    """flashprobe's version plus the git SHA of its checkout, when there is one."""
    sha = git_sha()
    return f"{__version__}+g{sha[:12]}" if sha else __version__


def run_order(cells: Sequence[Cell]) -> list[Cell]:
    """Suite order, except that with a branch each (grid point, seed) group runs its source
    first, then the cells branching from it."""
    if not any(c.branch_from for c in cells):
        return list(cells)
    groups: dict[Any, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.group, []).append(cell)
    ordered: list[Cell] = []
    for members in groups.values():
        ordered += [c for c in members if c.branch_from is None]
        ordered += [c for c in members if c.branch_from is not None]
    return ordered


def plan_suite(
    suite: Suite,
    store: ResultStore,
    *,
    version: str,
    resume: bool = False,
    restart: bool = False,
) -> list[PlannedCell]:
    """What to do with each cell; refuses interrupted cells unless resume or restart."""
    if resume and restart:
        raise FlashprobeError("choose one of --resume and --restart")
    store.check_root()
    plan: list[PlannedCell] = []
    index_of: dict[tuple[str, Any], int] = {}
    interrupted: list[PlannedCell] = []
    shorter_runs = ExtensionIndex(store, suite.name, version)
    for index, cell in enumerate(run_order(suite.cells)):
        path = store.cell_dir(cell, version)
        action: Action = "run"
        checkpoint_step, extends, holder = None, None, None
        if store.is_finished(cell, version):
            action = "skip"
        elif (holder := lock_holder(path)) is not None:
            action = "busy"  # live in another process: neither interrupted nor to be run here
        elif store.is_interrupted(cell, version):
            point = resume_point(path / RUN_DIR)
            checkpoint_step = point.step if point.checkpoint is not None else None
            action = "resume" if resume else "restart"
        elif (extends := shorter_runs.find(cell)) is not None:
            action, checkpoint_step = "extend", extends.checkpoint_step
        planned = PlannedCell(
            index=index,
            cell=cell,
            setup=resolve_cell_config(cell.config),
            key=cell_key(cell, version),
            path=path,
            action=action,
            source=index_of.get((cell.branch_from, cell.group)) if cell.branch_from else None,
            checkpoint_step=checkpoint_step,
            extends=extends,
            holder=holder,
        )
        if action in ("resume", "restart") and not (resume or restart):
            interrupted.append(planned)
        index_of[cell.variant, cell.group] = index
        plan.append(planned)
    if interrupted:
        first = interrupted[0]
        more = f" (and {len(interrupted) - 1} more)" if len(interrupted) > 1 else ""
        last = (
            f"last checkpoint: step {first.checkpoint_step}"
            if first.checkpoint_step is not None
            else "no checkpoint yet"
        )
        raise FlashprobeError(
            f"cell {first.cell.name} was interrupted{more} ({last}; {first.path}); rerun with "
            "--resume to continue it or --restart to start it over"
        )
    return plan
