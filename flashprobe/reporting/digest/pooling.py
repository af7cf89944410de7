"""Several digests → one run per (suite, variant, grid point, seed).

The same rule as a store's (attribution.selection): a run with an outcome (finished, or
diverged) before one cut short, then the longest, then the latest: a rerun with a longer plan
that was cut has no outcome, and must not hide the finished run it would replace. Longest
is the planned horizon (`train.steps` of the cell config); a v1 digest has no config, so its
runs are measured by the steps they reached. Latest is the run's start time (v2 digests),
else the digest's place among the arguments (pass older digests first). The same run digested
twice (one cell key, one start) keeps the digest that got further. Every other run is listed
as superseded, with what differs from the run counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from flashprobe.attribution.ranking import component_diff, component_label
from flashprobe.reporting.digest.schema import DigestCell


@dataclass(frozen=True)
class Superseded:
    """A run left out of the counts and the run counted instead."""

    cell: DigestCell
    by: DigestCell

    @property
    def differs(self) -> str:
        mine, theirs = self.cell, self.by
        if mine.key is not None and mine.key == theirs.key and mine.started == theirs.started:
            return f"the same run, digested at {mine.steps_reached} steps"
        if mine.config is not None and theirs.config is not None:
            diff = component_diff(mine.config, theirs.config)
            if diff:
                return component_label({k: diff[k] for k in sorted(diff)})
        code, other = mine.meta.get("code_version"), theirs.meta.get("code_version")
        if code != other:
            return f"code {code}"
        return "an earlier run of the same config"

    def describe(self) -> str:
        return (
            f"{self.cell.label} ({self.cell.name} in {self.cell.describe_source()}: "
            f"{self.differs}; counted: {self.by.name} in {self.by.describe_source()})"
        )


def run_key(cell: DigestCell) -> tuple[object, ...]:
    return (cell.suite, cell.variant, cell.point, cell.seed)


def one_run_per_seed(
    cells: Sequence[DigestCell],
) -> tuple[list[DigestCell], list[Superseded]]:
    """(the cells counted, in their input order; the superseded ones)."""
    groups: dict[tuple[object, ...], list[DigestCell]] = {}
    for cell in cells:
        groups.setdefault(run_key(cell), []).append(cell)
    kept: set[int] = set()
    superseded = []
    for members in groups.values():
        best = max(members, key=_preference)
        kept.add(id(best))
        superseded += [Superseded(c, best) for c in members if c is not best]
    return [c for c in cells if id(c) in kept], superseded


def _preference(cell: DigestCell) -> tuple[bool, float, float, int, int, int]:
    has_outcome = cell.finished or cell.diverged_step is not None
    length = cell.planned_steps if cell.planned_steps is not None else cell.steps_reached
    started = cell.started if cell.started is not None else -math.inf
    return (has_outcome, length, started, cell.steps_reached, cell.order, cell.index)
