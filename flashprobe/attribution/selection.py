"""Which cells a report counts: one run per (variant, grid point, seed).

A store keeps every run it was given. Running a suite again with a longer horizon
(`--set train.steps=3500`), after a code change (the code version is part of a cell's key), or
with another setting under the same variant name adds cells beside the old ones; counting them
all would count a seed twice and mix horizons in one variant's config. So a report counts each
(variant, point, seed) once: a run with an outcome (finished, or cut off after it diverged:
attribution.failure.has_outcome) before one cut short without (a cut rerun with a longer plan
must not hide the finished run), then the run with the most steps
(`train.steps`), then the one started last. The others are listed as superseded, with what
differs from the counted run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flashprobe.attribution.failure import has_outcome
from flashprobe.attribution.ranking import component_diff, component_label
from flashprobe.store import reader as sr
from flashprobe.suites.cell_config import horizon


@dataclass(frozen=True)
class Superseded:
    """A run left out of the counts, the run counted instead, and how their configs differ."""

    cell: sr.CellView
    by: sr.CellView

    @property
    def differs(self) -> str:
        diff = component_diff(self.cell.config, self.by.config)
        if diff:
            return component_label({k: diff[k] for k in sorted(diff)})
        mine, theirs = self.cell.meta.get("code_version"), self.by.meta.get("code_version")
        if mine != theirs:
            return f"code {mine}"
        return "an earlier run of the same config"

    def describe(self) -> str:
        return f"{self.cell.name} ({self.differs}; counted: {self.by.name})"


def one_run_per_seed(
    cells: Sequence[sr.CellView],
) -> tuple[list[sr.CellView], list[Superseded]]:
    """(the cells counted, in store order; the superseded ones)."""
    groups: dict[tuple[object, ...], list[sr.CellView]] = {}
    for cell in cells:
        groups.setdefault((cell.variant, cell.point, cell.seed), []).append(cell)
    kept: set[int] = set()
    superseded = []
    for members in groups.values():
        best = max(members, key=lambda c: (has_outcome(c), horizon(c.config), c.started))
        kept.add(id(best))
        superseded += [Superseded(c, best) for c in members if c is not best]
    return [c for c in cells if id(c) in kept], superseded
