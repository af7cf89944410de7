"""Train the planned cells of a suite in order, into the result store (rank 0 writes).

A cell that raises is recorded as failed and the suite goes on (its branches do not run); it
stays unfinished in the store, so the next invocation retries it. Each cell is trained under
its lock (runner.cell_lock), from its branch source's checkpoint, its own latest checkpoint
(resume) or a copy of its shorter finished run (extend: runner.extension).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from flashprobe.environment import environment
from flashprobe.errors import FlashprobeError
from flashprobe.runner.cell_lock import CellBusy, cell_lock
from flashprobe.runner.extension import copy_run
from flashprobe.runner.plan import PlannedCell
from flashprobe.store.capture import CAPTURE_DIR, CaptureWriter
from flashprobe.store.result_store import RUN_DIR, SUMMARY, ResultStore, read_json
from flashprobe.suites.suite import Cell
from flashprobe.train.checkpoint import checkpoint_name, resume_point

Status = Literal["done", "cached", "failed", "not_run"]


@dataclass(frozen=True)
class CellOutcome:
    planned: PlannedCell
    status: Status
    summary: Mapping[str, Any] | None = None
    message: str | None = None  # why a cell failed or did not run
    busy: bool = False  # not run: another process was writing it (its lock held)


class SuiteEvents:
    """Progress hooks (rank 0 only). The CLI's display subclasses this; tests inject faults."""

    def suite_started(self, plan: Sequence[PlannedCell]) -> None: ...

    def cell_started(self, planned: PlannedCell) -> None: ...

    def step(self, record: Mapping[str, Any]) -> None: ...

    def cell_finished(self, outcome: CellOutcome) -> None: ...

    def suite_finished(self) -> None:
        """Training is over (or stopped); the replay, if any, comes next."""

    def replay_progress(self, message: str) -> None:
        """A line of the replay's progress after training."""


def plan_device(plan: Sequence[PlannedCell]) -> str:
    """The one train.device of the cells to run (torchrun ranks must agree on it)."""
    devices = {p.setup.train.train.device for p in plan if p.action != "skip"}
    if len(devices) > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise FlashprobeError(f"under torchrun every cell needs the same train.device: {devices}")
    return next(iter(devices), "auto")


@contextlib.contextmanager
def suite_session(plan: Sequence[PlannedCell]) -> Iterator[None]:
    """The process group for a whole command: training, then rank 0's replay and report.

    Under torchrun every rank stays until rank 0 is done (a rank that exits while another
    still works can abort in gloo's teardown); run_plan inside reuses this group.
    """
    from flashprobe.train.distributed import setup_distributed

    dist = setup_distributed(plan_device(plan))
    try:
        yield
    finally:
        dist.close()


def run_plan(
    plan: Sequence[PlannedCell],
    store: ResultStore,
    *,
    version: str,
    events: SuiteEvents | None = None,
) -> list[CellOutcome]:
    """Run the planned cells in order; returns one outcome per cell.

    A cell that raises is recorded as failed and the suite goes on (its branches do not run);
    it stays unfinished in the store, so the next invocation retries it. KeyboardInterrupt and
    any failure under torchrun (where one rank cannot go on alone) propagate.
    """
    from flashprobe.train.distributed import setup_distributed

    dist = setup_distributed(plan_device(plan))
    events = events if events is not None and dist.is_main else SuiteEvents()
    try:
        env = environment(str(dist.device), dist.world_size) if dist.is_main else {}
        events.suite_started(plan)
        outcomes: list[CellOutcome] = []
        for planned in plan:
            outcome = _run_cell(planned, outcomes, store, version, env, dist, events)
            outcomes.append(outcome)
            events.cell_finished(outcome)
        return outcomes
    finally:
        events.suite_finished()
        dist.close()


def _run_cell(
    planned: PlannedCell,
    outcomes: Sequence[CellOutcome],
    store: ResultStore,
    version: str,
    env: Mapping[str, Any],
    dist: Any,
    events: SuiteEvents,
) -> CellOutcome:
    cell = planned.cell
    if planned.action == "skip":
        return CellOutcome(planned, "cached", read_json(planned.path / SUMMARY))
    start_from, source = None, None
    if cell.branch_from is not None and planned.source is not None:
        source = outcomes[planned.source]
        if planned.extends is not None:  # resumes from its own checkpoint; needs its source run
            if source.status not in ("done", "cached"):
                return CellOutcome(planned, "not_run", message=_unreachable(source, cell))
        elif cell.branch_step:
            start_from = source.planned.run_dir / "checkpoints" / checkpoint_name(cell.branch_step)
            if not (start_from / "state.json").is_file():
                return CellOutcome(planned, "not_run", message=_unreachable(source, cell))
    with _single_writer(planned, dist) as refused:
        if refused is not None:
            return refused
        return _train_cell(planned, source, start_from, store, version, env, dist, events)


@contextlib.contextmanager
def _single_writer(planned: PlannedCell, dist: Any) -> Iterator[CellOutcome | None]:
    """Hold the cell's lock (rank 0) while the block trains it; yields the outcome instead when
    it must not train here: another process holds the lock, or the cell changed since it was
    planned (finished meanwhile: cached; started and stopped by another process: not run)."""
    with contextlib.ExitStack() as held:
        refused = None
        if dist.is_main:
            try:
                held.enter_context(cell_lock(planned.path))
            except CellBusy as exc:
                refused = CellOutcome(planned, "not_run", message=f"busy: {exc}", busy=True)
            else:
                refused = _changed_since_planned(planned)
        if dist.world_size > 1:  # every rank must skip the cell, or none
            import torch

            flag = torch.tensor(float(refused is not None), device=dist.device)
            if float(dist.mean(flag)) > 0 and refused is None:  # as rank 0 decided
                finished = (planned.path / SUMMARY).is_file()
                refused = (
                    CellOutcome(planned, "cached", read_json(planned.path / SUMMARY))
                    if finished
                    else CellOutcome(planned, "not_run", message="refused on rank 0")
                )
        yield refused


def _changed_since_planned(planned: PlannedCell) -> CellOutcome | None:
    if (planned.path / SUMMARY).is_file():
        return CellOutcome(planned, "cached", read_json(planned.path / SUMMARY))
    if planned.action == "busy":
        return CellOutcome(
            planned,
            "not_run",
            message=f"another process was writing it as this run started ({planned.holder}) "
            "and stopped before it finished; rerun (with --resume to continue it)",
        )
    if planned.action == "run" and (planned.run_dir / "metrics.jsonl").is_file():
        return CellOutcome(
            planned,
            "not_run",
            message="another process started it meanwhile and stopped; rerun with --resume "
            "or --restart",
        )
    return None


def _train_cell(
    planned: PlannedCell,
    source: CellOutcome | None,
    start_from: Path | None,
    store: ResultStore,
    version: str,
    env: Mapping[str, Any],
    dist: Any,
    events: SuiteEvents,
) -> CellOutcome:
    from flashprobe.train.run import train_run

    cell = planned.cell
    events.cell_started(planned)
    extends = planned.extends  # planned only when its checkpoint exists: always a resume
    # The newest intact checkpoint (read now, under the lock): none left starts the run over
    point = resume_point(planned.run_dir) if planned.action == "resume" else None
    resume = extends is not None or (point is not None and point.checkpoint is not None)
    resumed_from = point.step if point is not None else planned.checkpoint_step
    if dist.is_main:
        extra = {
            "source_key": source.planned.key if source else None,
            "source_cell": source.planned.path.name if source else None,
            "source_checkpoint": _relative(start_from, store.root),
            "extended_from": extends.key if extends else None,
        }
        store.open_cell(cell, version, env, extra)
        if planned.action in ("restart", "extend") or (planned.action == "resume" and not resume):
            store.reset(planned.path)  # extend: a run/ left by a copy that was cut off
        if extends is not None:
            copy_run(extends.path / RUN_DIR, planned.run_dir)
    dist.barrier()
    writer = (
        CaptureWriter(
            planned.run_dir / CAPTURE_DIR,
            planned.setup.capture,
            planned.setup.train,
            start_step=planned.start_step,
        )
        if planned.setup.capture.enabled
        else None
    )
    meter = _StepMeter(events)
    try:
        result = train_run(
            planned.setup.train,
            planned.run_dir,
            resume=resume,
            start_from=None if resume else start_from,
            progress=meter,
            capture=writer,
        )
    except Exception as exc:
        if dist.world_size > 1:
            raise
        last = traceback.format_exception_only(exc)[-1].strip().splitlines()[0]
        return CellOutcome(planned, "failed", message=last)
    summary = {
        "status": "done",
        **{k: v for k, v in result.to_dict().items() if k not in ("out_dir", "data_digest")},
        # train_run's figure also counts time restored from a branch source's checkpoint
        "tokens_per_s": meter.tokens_per_s() if meter.steps else result.tokens_per_s,
        "steps_trained": meter.steps,
        "run_dir": RUN_DIR,
        "suite": cell.suite,
        "variant": cell.variant,
        "point": [list(p) for p in cell.point],
        "seed": cell.seed,
        "key": planned.key,
        "code_version": version,
        "branch_from": cell.branch_from,
        "branch_step": cell.branch_step,
        "source_key": source.planned.key if source else None,
        "resumed_from_step": resumed_from if resume else None,
        "resume_notes": list(point.notes) if point is not None else [],
        "extended_from": extends.key if extends else None,
        # what the cell trained on belongs with what it ran on: reports compare it per suite
        "environment": {**env, "data_digest": result.data_digest},
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if dist.is_main:
        store.finish(planned.path, summary)
    dist.barrier()
    # Said in the run's summary lines: a damaged checkpoint or log line cost recomputed steps
    return CellOutcome(planned, "done", summary, message=point.describe() if point else None)


class _StepMeter:
    """Forwards step records to the events and measures this cell's own throughput."""

    def __init__(self, events: SuiteEvents) -> None:
        self.events, self.steps, self.seconds_per_token = events, 0, 0.0

    def __call__(self, record: Mapping[str, Any]) -> None:
        rate = record.get("tokens_per_s")
        if rate:
            self.steps += 1
            self.seconds_per_token += 1.0 / rate
        self.events.step(record)

    def tokens_per_s(self) -> float:
        """Steps × tokens over their summed time (equal tokens per step: harmonic mean)."""
        return self.steps / self.seconds_per_token if self.seconds_per_token else 0.0


def _unreachable(source: CellOutcome, cell: Cell) -> str:
    name = source.planned.cell.name
    summary = source.summary or {}
    if source.status in ("failed", "not_run"):
        return f"branch source {name} {source.status.replace('_', ' ')}"
    if summary.get("diverged") and (summary.get("steps_done") or 0) < (cell.branch_step or 0):
        return (
            f"branch source {name} diverged at step {summary.get('diverged_step')} before the "
            f"branch step {cell.branch_step}"
        )
    return f"branch source {name} has no checkpoint at step {cell.branch_step}"


def _relative(path: Path | None, root: Path) -> str | None:
    if path is None:
        return None
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
