"""A gradient-norm runaway: a run the loss rule let pass whose gradient norm blew up anyway.

The divergence rule (train.divergence) watches the loss; a run can end its steps with its
gradient norm a thousand times its usual size and its loss rising, short of the rule (AdamW
attribution, `o-fp32` seed 1: docs/findings.md). `gradient_runaway` finds the first logged step
whose gradient norm is at least RUNAWAY_FACTOR times the median of the run's earlier logged
norms (at least RUNAWAY_HISTORY of them). Reports name such runs beside their outcome; it never
changes an outcome or a count.

The norms are the run's own logged ones: a branched run's start at its branch step (its source's
earlier steps are not part of its median; `report` and `digest-report` both read them so). With
the source's norms before the branch in front, the AdamW attribution flags the same runs, four
of them 10–70 steps later (`o-fp32` seed 1: 2,929 instead of 2,859). A non-finite or
missing norm is skipped (a non-finite one fires the loss rule's `nonfinite` check anyway).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

RUNAWAY_FACTOR = 100.0  # a gradient norm this many times its run's earlier median
RUNAWAY_HISTORY = 10  # logged norms before a step that its median needs


@dataclass(frozen=True)
class GradientRunaway:
    """The first logged step whose gradient norm reached RUNAWAY_FACTOR × the earlier median."""

    step: int
    grad_norm: float
    earlier_median: float

    def describe(self) -> str:
        ratio = self.grad_norm / self.earlier_median
        return (f"gradient norm {self.grad_norm:.3g} at step {self.step}, {ratio:,.0f}× its "
                f"earlier median {self.earlier_median:.2g}")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "grad_norm": self.grad_norm,
                "earlier_median": self.earlier_median}  # fmt: skip


def gradient_runaway(
    norms: Iterable[tuple[int, float | None]], horizon: int | None = None
) -> GradientRunaway | None:
    """The first runaway among (step, gradient norm) records in step order, by `horizon`."""
    earlier: list[float] = []
    for step, norm in norms:
        if horizon is not None and step > horizon:
            break
        if norm is None or not math.isfinite(norm):
            continue
        if len(earlier) >= RUNAWAY_HISTORY:
            median = statistics.median(earlier)
            if median > 0 and norm >= RUNAWAY_FACTOR * median:
                return GradientRunaway(step, norm, median)
        earlier.append(norm)
    return None


def runaway_note(found: Iterable[tuple[str, int, GradientRunaway]]) -> list[str]:
    """The report note that names the runs: `found` holds (variant, seed, its runaway)."""
    runs = [f"{variant} seed {seed}: {runaway.describe()}" for variant, seed, runaway in found]
    if not runs:
        return []
    return [
        f"not failed by the run's rule, but the gradient norm ran away (≥ {RUNAWAY_FACTOR:g}× the "
        "median of the run's earlier logged norms; it changes no outcome): " + "; ".join(runs)
    ]
