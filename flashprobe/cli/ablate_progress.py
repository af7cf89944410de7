"""The ablate command's progress display: live bars on a terminal; in a log (not a terminal)
a line every N steps with the cell's and the suite's ETA, and one line per finished cell.

Everything goes to stderr, so stdout holds only the final table (pipe-friendly).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from flashprobe.runner.plan import PlannedCell
from flashprobe.runner.training import CellOutcome, SuiteEvents


class ProgressDisplay(SuiteEvents):
    """Cell k of n, step, loss, tokens/s and ETA (of the cell and of the suite).

    every: in a log, a progress line every this many steps (None: about ten per cell, at a
    round step count; 0: none, only a line per finished cell)."""

    def __init__(
        self, console: Console | None = None, live: bool | None = None, every: int | None = None
    ) -> None:
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal if live is None else live
        self.every = every
        self.plan: Sequence[PlannedCell] = ()
        self.progress: Progress | None = None
        self.cell_task: Any = None
        self.current: PlannedCell | None = None
        self.cell_start = 0.0
        self.first_step: int | None = None
        self.done_cells = 0

    # -- SuiteEvents ---------------------------------------------------------------------------
    def suite_started(self, plan: Sequence[PlannedCell]) -> None:
        self.plan = plan
        if not self.live:
            return
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}  {task.fields[tps]} tok/s"),
            TextColumn("ETA {task.fields[eta]}"),
            console=self.console,
            transient=True,
        )
        self.progress.start()
        self.cell_task = self.progress.add_task("", total=1, loss="-", tps="-", eta="-")

    def cell_started(self, planned: PlannedCell) -> None:
        self.current, self.cell_start, self.first_step = planned, time.perf_counter(), None
        if self.progress is not None:
            self.progress.reset(
                self.cell_task,
                total=planned.steps,
                completed=planned.first_step,
                description=f"[{planned.index + 1}/{len(self.plan)}] {planned.cell.name}",
                loss="-",
                tps="-",
                eta="-",
            )

    def step(self, record: Mapping[str, Any]) -> None:
        if self.current is None:
            return
        step = int(record["step"])
        per_step = None
        if self.first_step is None:
            self.first_step, self.cell_start = step, time.perf_counter()
        elif step > self.first_step:
            per_step = (time.perf_counter() - self.cell_start) / (step - self.first_step)
        loss = record.get("loss")
        loss_text = "nan" if loss is None else f"{loss:.4g}"
        if self.progress is not None:
            eta = "-" if per_step is None else _duration(per_step * self._steps_left(step + 1))
            self.progress.update(
                self.cell_task,
                completed=step + 1,
                loss=loss_text,
                tps=_si(record.get("tokens_per_s")),
                eta=eta,
            )
            return
        every = log_interval(self.current.steps) if self.every is None else self.every
        if every and (step + 1) % every == 0 and step + 1 < self.current.steps:
            cell_eta = suite_eta = "-"
            if per_step is not None:
                cell_eta = _duration(per_step * (self.current.steps - step - 1))
                suite_eta = _duration(per_step * self._steps_left(step + 1))
            line = (
                f"[{self.current.index + 1}/{len(self.plan)}] {self.current.cell.name}: step "
                f"{step + 1}/{self.current.steps}, loss {loss_text}, "
                f"{_si(record.get('tokens_per_s'))} tok/s, ETA cell {cell_eta}, suite {suite_eta}"
            )
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def cell_finished(self, outcome: CellOutcome) -> None:
        self.done_cells += 1
        line = cell_line(outcome, len(self.plan))
        if self.progress is not None:
            self.progress.console.print(line, markup=False, highlight=False)
        else:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def suite_finished(self) -> None:
        self.close()

    def replay_progress(self, message: str) -> None:
        if self.live:
            self.console.print(message)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    # -- helpers --------------------------------------------------------------------------------
    def _steps_left(self, done: int) -> int:
        """Steps left in the current cell plus those of the cells after it (suite ETA)."""
        assert self.current is not None
        left = self.current.steps - done
        for later in self.plan[self.current.index + 1 :]:
            if later.action != "skip":
                left += later.steps - later.first_step
        return left


def log_interval(steps: int) -> int:
    """About a tenth of a cell's steps, as the nearest 1, 2 or 5 × a power of ten."""
    target = max(1.0, steps / 10)
    scale = 10 ** (len(str(int(target))) - 1)
    return min((m * scale for m in (1, 2, 5, 10)), key=lambda n: abs(math.log(n / target)))


def cell_line(outcome: CellOutcome, total: int) -> str:
    """One line per finished cell (the non-terminal progress, and the terminal's history)."""
    planned = outcome.planned
    head = f"[{planned.index + 1}/{total}] {planned.cell.name}"
    summary = outcome.summary or {}
    if outcome.status == "cached":
        return f"{head}: finished earlier, skipped ({planned.path.name})"
    if outcome.status in ("failed", "not_run"):
        word = "FAILED" if outcome.status == "failed" else "not run"
        return f"{head}: {word}: {outcome.message}"
    state = (
        f"diverged at step {summary.get('diverged_step')} ({summary.get('divergence_rule')})"
        if summary.get("diverged")
        else "done"
    )
    return (
        f"{head}: {state}, {summary.get('steps_done')} steps, loss "
        f"{_num(summary.get('final_loss'))} (min {_num(summary.get('min_loss'))}), "
        f"{_si(summary.get('tokens_per_s'))} tok/s, {_duration(summary.get('wall_time_s'))}"
        f"{_overhead(summary)}"
    )


def _overhead(summary: Mapping[str, Any], share: float = 0.05, floor_s: float = 1.0) -> str:
    """The phases besides training that took at least `share` of the wall time and `floor_s`,
    e.g. " (checkpoint 0:31)": where a slow cell's time went."""
    phases, wall = summary.get("time_by_phase_s"), summary.get("wall_time_s")
    if not isinstance(phases, dict) or not isinstance(wall, int | float) or wall <= 0:
        return ""
    big = [
        f"{name} {_duration(seconds)}"
        for name, seconds in phases.items()
        if name != "train"
        and isinstance(seconds, int | float)
        and seconds >= max(share * wall, floor_s)
    ]
    return f" ({', '.join(big)})" if big else ""


def _num(value: Any) -> str:
    return "nan" if value is None else f"{value:.4g}"


def _si(value: Any) -> str:
    if value is None:
        return "-"
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


def _duration(seconds: Any) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
