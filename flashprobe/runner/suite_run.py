"""`flashprobe ablate` as two calls: `plan_run` (what a run would do; a dry run stops there) and
`run_suite` (prepare, plan, train here or in --jobs shard processes, replay what finished).

    request = SuiteRequest("smoke", overrides=("seeds=[0]",), store=Path("runs"))
    run = run_suite(request)
    run.outcomes, run.replay, run.ok

Under torchrun every rank calls run_suite and trains; rank 0 writes the store, replays and gets
the result (the other ranks get None).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashprobe.errors import FlashprobeError, RunStopped
from flashprobe.runner import plan as planning
from flashprobe.runner.data_check import check_data
from flashprobe.runner.definition import write_suite_definition
from flashprobe.runner.parallel import (
    check_jobs,
    child_command,
    plan_shards,
    run_shards,
    spread_over_gpus,
    trained_as_done,
    visible_gpus,
    watch_parent,
)
from flashprobe.runner.plan import PlannedCell, plan_suite
from flashprobe.runner.prepare import (
    machine_problems,
    prepare_suite,
    replay_settings,
    select_variants,
)
from flashprobe.runner.replay_after_run import SuiteReplay, replay_finished
from flashprobe.runner.shards import parse_shard, select_shard
from flashprobe.runner.summary import outcome_row, plan_row
from flashprobe.runner.training import CellOutcome, SuiteEvents, run_plan, suite_session
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.suite import Suite

if TYPE_CHECKING:
    from flashprobe.attribution.replay_settings import ReplaySettings

Say = Callable[[str], None]


@dataclass(frozen=True)
class SuiteRequest:
    """What `flashprobe ablate` was asked: the suite, its edits and how to run it."""

    config: str  # a suite file, or a bundled suite's name
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE
    variants: tuple[str, ...] = ()  # only these (and their branch source)
    store: Path = Path("runs")
    resume: bool = False
    restart: bool = False
    replay: bool = True  # run the suite's replay: section after training
    jobs: int | None = None  # train in this many shard processes (None: the suite's `jobs:`)
    shard: str | None = None  # "K/N": only this shard


@dataclass(frozen=True)
class SuitePlan:
    """A validated, planned suite: what a run would do (all a dry run does)."""

    full: Suite  # as loaded, after --set (written to suite.json)
    suite: Suite  # the cells to run: after --variant and --shard
    store: ResultStore
    version: str
    cells: list[PlannedCell]
    replay: ReplaySettings | None  # None: no replay: section, --no-replay, or a shard
    problems: tuple[str, ...] = ()  # dry run: what only the target machine can check
    jobs: int = 1  # shard processes to train in: --jobs, else the suite's (1 in a shard)

    def rows(self) -> list[dict[str, Any]]:
        """One row per cell: its action, branch, steps and the tokens it would train."""
        return [plan_row(p) for p in self.cells]


@dataclass(frozen=True)
class SuiteRun:
    """A finished run: one outcome per cell, and the replay when the suite asked for one."""

    suite: str
    store: ResultStore
    version: str
    outcomes: list[CellOutcome]
    replay: SuiteReplay | None

    @property
    def folder(self) -> Path:
        return self.store.root / self.suite

    @property
    def ok(self) -> bool:
        """Every cell done or cached, and the replay (if any) did not fail."""
        if any(o.status in ("failed", "not_run") for o in self.outcomes):
            return False
        return self.replay is None or self.replay.status != "failed"

    def rows(self) -> list[dict[str, Any]]:
        return [outcome_row(o) for o in self.outcomes]

    def to_dict(self) -> dict[str, Any]:
        """The run as a JSON document: per cell its row, folder, message and summary."""
        return {
            "suite": self.suite,
            "store": str(self.folder),
            "code_version": self.version,
            "cells": [
                {**row, "path": str(o.planned.path), "message": o.message, "summary": o.summary}
                for row, o in zip(self.rows(), self.outcomes, strict=True)
            ],
            "replay": self.replay.to_dict() if self.replay is not None else None,
        }


def plan_run(request: SuiteRequest, *, dry_run: bool = False, say: Say | None = None) -> SuitePlan:
    """Load and check the whole suite, select its cells (--variant, --shard) and plan them; the
    machine and the data (runner.data_check) are checked for the selected variants; writes
    nothing.

    dry_run: what only the target machine can check (a CUDA GPU, the data folder, a pysource
    corpus not built yet) is listed in `problems` instead of refused."""
    say = say or _quiet
    if request.jobs is not None:
        check_jobs(request.jobs)
    part = parse_shard(request.shard) if request.shard is not None else None
    if part is not None and (request.jobs or 1) > 1:
        raise FlashprobeError("--jobs starts its own shards; give --shard or --jobs, not both")
    full = prepare_suite(
        request.config, request.overrides, check_machine=not dry_run, variants=request.variants
    )
    jobs = _jobs(request.jobs, full.jobs, in_shard=part is not None)
    settings = replay_settings(full, check_machine=not dry_run) if request.replay else None
    selected = select_variants(full, request.variants)
    suite = selected
    if part is not None:
        suite = select_shard(selected, *part)
        if settings is not None and not dry_run:
            say(
                f"replay: not in a shard; run `flashprobe replay {request.store} --suite "
                f"{suite.name}` once every shard is done"
            )
        settings = None
    version = planning.code_version()
    store = ResultStore(request.store)
    cells = _plan(request, suite, store, version)
    # The selected variants' data (every shard's: they check alike), opened once per config (a
    # run builds a pysource corpus here); unselected variants' data is not this run's concern
    to_train = any(p.action not in ("skip", "busy") for p in cells)
    unchecked = check_data(selected.cells, build=not dry_run) if to_train else []
    problems = tuple(machine_problems(suite, full if settings else None)) if dry_run else ()
    return SuitePlan(full, suite, store, version, cells, settings, (*problems, *unchecked), jobs)


def _jobs(asked: int | None, declared: int, *, in_shard: bool) -> int:
    """--jobs when given; else the suite's `jobs:`, except in a shard process (it is one of them)
    and under torchrun (which has its own processes)."""
    if asked is not None:
        return asked
    if in_shard or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return 1
    return declared


def run_suite(
    request: SuiteRequest, *, events: SuiteEvents | None = None, say: Say | None = None
) -> SuiteRun | None:
    """Run a suite into its store: plan it, write suite.json, train the cells (here, or in
    shard processes whose cells are then read back: --jobs, else the suite's `jobs:`), then
    replay what finished.

    events: progress of the training and replay in this process; say: one-line notes (shard
    processes starting and ending). Raises RunStopped on Ctrl-C or a failed shard process,
    FlashprobeError on bad input. Returns None on torchrun ranks other than 0."""
    say = say or _quiet
    watch_parent()  # a --jobs shard process: stop when the parent is gone
    planned = plan_run(request, say=say)
    suite, store, version, plan = planned.suite, planned.store, planned.version, planned.cells
    main_rank = int(os.environ.get("RANK", "0")) == 0
    if main_rank:
        write_suite_definition(store, planned.full, request.overrides)
    trained = [p.path for p in plan if p.action != "skip"] if planned.jobs > 1 else []
    if trained:  # the shard processes train; then this one reads their cells back
        _train_in_shards(request, planned.jobs, plan, store, suite.name, say)
        plan = _plan(request, suite, store, version)
        left = [p for p in plan if p.action != "skip"]
        if left:  # the suite file or the code version (git commit) changed meanwhile
            raise RunStopped(
                f"the shard processes left {len(left)} of {len(plan)} cells unfinished "
                f"({left[0].cell.name} first); did the suite file or the git commit change "
                "meanwhile?",
                1,
            )
    local = events if events is not None and not trained else SuiteEvents()
    with suite_session(plan):
        try:
            outcomes = run_plan(plan, store, version=version, events=local)
        except KeyboardInterrupt:
            raise RunStopped(
                "interrupted; rerun with --resume to continue the unfinished cell", 130
            ) from None
        if not main_rank:
            return None
        outcomes = trained_as_done(outcomes, trained)
        replay = None
        if planned.replay is not None:
            try:
                replay = replay_finished(
                    store, suite, outcomes, settings=planned.replay, progress=local.replay_progress
                )
            except KeyboardInterrupt:
                raise RunStopped(
                    "interrupted during the replay; the trained cells are kept: rerun the same "
                    "command to replay them",
                    130,
                ) from None
    return SuiteRun(suite.name, store, version, outcomes, replay)


def _plan(
    request: SuiteRequest, suite: Suite, store: ResultStore, version: str
) -> list[PlannedCell]:
    return plan_suite(suite, store, version=version, resume=request.resume, restart=request.restart)


def _train_in_shards(
    request: SuiteRequest,
    jobs: int,
    plan: Sequence[PlannedCell],
    store: ResultStore,
    suite: str,
    say: Say,
) -> None:
    """Train the plan in `jobs` shard processes; RunStopped if one failed or on Ctrl-C."""
    command = functools.partial(
        child_command,
        config=request.config,
        overrides=request.overrides,
        variants=request.variants,
        store=store.root,
        resume=request.resume,
        restart=request.restart,
    )
    shards = plan_shards(plan, jobs, store_root=store.root, suite=suite, command=command)
    if any(p.action != "skip" and _on_gpu(p) for p in plan):
        shards = spread_over_gpus(shards, visible_gpus())
    try:
        results = run_shards(shards, say=say)
    except KeyboardInterrupt:
        raise RunStopped(
            "interrupted; the shard processes were stopped; rerun with --resume to continue "
            "their unfinished cells",
            130,
        ) from None
    failed = [r for r in results if not r.ok]
    if failed:
        names = ", ".join(r.shard.name for r in failed)
        raise RunStopped(
            f"{len(failed)} of {len(results)} shard processes failed ({names}); see "
            f"{failed[0].shard.log}; the finished cells are kept (rerun to train the rest, "
            "with --resume for interrupted ones)",
            1,
        )


def _on_gpu(planned: PlannedCell) -> bool:
    """The cell trains on a CUDA GPU where there is one (device cuda, or auto)."""
    return planned.setup.train.train.device != "cpu"


def _quiet(_line: str) -> None:
    pass
