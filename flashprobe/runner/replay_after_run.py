"""The replay after a run: with a `replay:` section (checked with the rest of the suite), every
finished cell of the run is replayed once all cells ran (attribution.replay; rank 0 only).
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.runner.prepare import replay_settings
from flashprobe.runner.training import CellOutcome
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.suite import Suite


@dataclass(frozen=True)
class SuiteReplay:
    """What the post-run replay did: status replayed / cached / skipped / failed."""

    status: str
    message: str
    suite_file: str | None = None
    cells: tuple[Mapping[str, Any], ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "file": self.suite_file,
            "cells": [dict(c) for c in self.cells],
            "notes": list(self.notes),
        }


def replay_finished(
    store: ResultStore,
    suite: Suite,
    outcomes: Sequence[CellOutcome],
    *,
    settings: Any = None,
    progress: Any = None,
) -> SuiteReplay:
    """Replay the cells this run finished (done or cached) with the suite's replay settings.

    Failed or not-run cells are left out; variants with no finished cell are dropped from
    replay.variants, and a run whose baseline finished no cell replays nothing ("skipped"), as
    does a run that found cells busy in another process (the suite's replay would leave them
    out; a rerun once they are done replays them all).
    A replay error is returned as "failed" (the store keeps every training result).
    """
    from flashprobe.attribution.replay import replay_cells
    from flashprobe.store import reader as sr

    settings = settings if settings is not None else replay_settings(suite)
    if settings is None:
        return SuiteReplay("skipped", "the suite has no replay: section")
    elsewhere = [o.planned.cell.name for o in outcomes if o.busy]
    if elsewhere:  # its replay would leave out what the other process trains
        return SuiteReplay(
            "skipped",
            f"{len(elsewhere)} cells were being trained by another process ({elsewhere[0]} "
            "first): rerun this command once it is done to replay the whole suite",
        )
    finished = {o.planned.path.resolve() for o in outcomes if o.status in ("done", "cached")}
    if not finished:
        return SuiteReplay("skipped", "no cell finished")
    try:
        cells = [c for c in sr.read_cells(store.root, suite.name) if c.path.resolve() in finished]
    except FlashprobeError as exc:
        return SuiteReplay("failed", str(exc))
    present = list(dict.fromkeys(c.variant for c in cells))
    baseline = settings.baseline
    if baseline is None:
        branch = {c.branch_from for c in suite.cells if c.branch_from}
        baseline = next(iter(branch)) if len(branch) == 1 else None
    if baseline is not None and baseline not in present:
        return SuiteReplay("skipped", f"the baseline {baseline} finished no cell")
    changes: dict[str, Any] = {}
    if settings.safe is not None and settings.safe not in present:
        changes["safe"] = None
    if settings.variants is not None:
        changes["variants"] = tuple(v for v in settings.variants if v in present)
    if changes:
        settings = dataclasses.replace(settings, **changes)
    try:
        outcome = replay_cells(cells, settings, progress=progress)
    except FlashprobeError as exc:
        return SuiteReplay("failed", str(exc))
    except Exception as exc:  # the training results stand; say what broke in one line
        return SuiteReplay("failed", traceback.format_exception_only(exc)[-1].strip())
    statuses = [c["status"] for c in outcome.cells]
    counts = {s: statuses.count(s) for s in dict.fromkeys(statuses)}
    done = [s for s in ("replayed", "cached") if counts.get(s)]
    said = ", ".join(f"{counts[s]} {s}" for s in counts) or "none"
    status = "replayed" if "replayed" in done else ("cached" if done else "skipped")
    wanted = settings.variants if settings.variants is not None else present
    return SuiteReplay(
        status,
        f"{len(wanted)} variants on the captures of {len(outcome.cells)} "
        f"{outcome.roles.baseline if settings.sources == 'baseline' else 'source'} cells ({said})",
        outcome.suite_file,
        tuple(outcome.cells),
        tuple(outcome.notes),
    )
