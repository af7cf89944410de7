"""Per-layer W_Q / W_K spectral norm trajectories, and which layer rises first.

The paper (arXiv:2510.04212, Fig. 11; /work/shared/paper.md) finds the spectral norm of one
layer's attention weights (its layer 2; "layer 1" 0-based) spiking before the loss explodes.
Two rules, on each matrix's per-layer series (the whole-matrix norm where the digest has it,
else the largest head's):

threshold rise  A layer rises at the first recorded step s at which its norm is at least
                `factor` × its norm at the reference step r (r: the first spectral record at or
                after `reference_step`; default the run's divergence.min_step, the step from
                which its loss rule watches, 0 when the digest has no config). The layers that
                rise at the earliest such step rise first (several at one record: ordered by
                their ratio there). It precedes the divergence when s < the divergence step,
                by (divergence step − s) steps; norms are recorded every `resolution` steps, so
                the rise happened within that many steps before s.
largest growth  The layer whose norm grew most, as a ratio, from r to the last record before
                the divergence step (a run that did not diverge: its last record, or the last
                before the horizon).

Both rules read only the records of the horizon's steps (steps before it, 0-based), when one
is given.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.schema import DigestCell

MATRICES = {"W_Q": ("wq", "wq_head_max"), "W_K": ("wk", "wk_head_max")}
SERIES_LABELS = {"wq": "whole matrix", "wk": "whole matrix", "wq_head_max": "largest head",
                 "wk_head_max": "largest head"}  # fmt: skip
DEFAULT_FACTOR = 2.0


@dataclass(frozen=True)
class RiseRule:
    factor: float = DEFAULT_FACTOR
    reference_step: int | None = None  # None: the run's divergence.min_step, else 0

    def __post_init__(self) -> None:
        if not 1.0 < self.factor < math.inf:  # inf: a rule that can never fire
            raise FlashprobeError(f"--rise-factor must be a finite number > 1, got {self.factor}")
        if self.reference_step is not None and self.reference_step < 0:
            raise FlashprobeError(f"--rise-from must be a step >= 0, got {self.reference_step}")

    def reference_for(self, cell: DigestCell) -> int:
        if self.reference_step is not None:
            return self.reference_step
        divergence = (cell.config or {}).get("divergence") or {}
        step = divergence.get("min_step")
        return int(step) if isinstance(step, int) else 0

    def describe(self) -> str:
        ref = (
            f"step {self.reference_step}"
            if self.reference_step is not None
            else "the run's divergence.min_step (0 without a config)"
        )
        return (
            f"a layer rises at the first recorded step where its spectral norm is ≥ "
            f"{self.factor:g} × its value at the first record at or after {ref}"
        )


@dataclass(frozen=True)
class Trajectory:
    """One matrix's per-layer spectral norms over the recorded steps."""

    matrix: str  # W_Q or W_K
    series: str  # the digest field: wq, wk, wq_head_max, wk_head_max
    steps: tuple[int, ...]
    values: tuple[tuple[float | None, ...], ...]  # [record][layer]

    @property
    def layers(self) -> int:
        return max((len(v) for v in self.values), default=0)

    def layer(self, i: int) -> list[tuple[int, float]]:
        return [
            (s, v[i]) for s, v in zip(self.steps, self.values, strict=True)
            if i < len(v) and v[i] is not None
        ]  # fmt: skip

    @property
    def resolution(self) -> int | None:
        gaps = [b - a for a, b in zip(self.steps, self.steps[1:], strict=False)]
        return int(statistics.median(gaps)) if gaps else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "matrix": self.matrix,
            "series": self.series,
            "steps": list(self.steps),
            "values": [list(v) for v in self.values],
        }


@dataclass(frozen=True)
class LayerRise:
    layer: int
    reference: float
    rise_step: int | None
    growth: float | None  # end value / reference value
    end: float | None


@dataclass(frozen=True)
class RiseResult:
    cell: DigestCell
    trajectory: Trajectory
    rule: RiseRule
    reference_step: int | None  # the record used; None: no record at or after it
    end_step: int | None
    diverged_step: int | None
    layers: tuple[LayerRise, ...] = field(default_factory=tuple)
    note: str = ""

    @property
    def order(self) -> list[LayerRise]:
        """The layers that rose, earliest first (one record: larger ratio first)."""
        risen = [r for r in self.layers if r.rise_step is not None]
        return sorted(risen, key=lambda r: (r.rise_step, -self._ratio_at_rise(r), r.layer))

    @property
    def first(self) -> list[LayerRise]:
        order = self.order
        return [r for r in order if r.rise_step == order[0].rise_step] if order else []

    @property
    def first_step(self) -> int | None:
        first = self.first
        return first[0].rise_step if first else None

    @property
    def lead(self) -> int | None:
        """Divergence step − first rise step (> 0: the rise came first)."""
        if self.first_step is None or self.diverged_step is None:
            return None
        return self.diverged_step - self.first_step

    @property
    def largest_growth(self) -> LayerRise | None:
        grown = [r for r in self.layers if r.growth is not None]
        return max(grown, key=lambda r: (r.growth, -r.layer)) if grown else None

    def _ratio_at_rise(self, rise: LayerRise) -> float:
        value = dict(self.trajectory.layer(rise.layer)).get(rise.rise_step)  # type: ignore[arg-type]
        return value / rise.reference if value is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        big = self.largest_growth
        return {
            "variant": self.cell.variant,
            "seed": self.cell.seed,
            "point": self.cell.point_label or None,
            "matrix": self.trajectory.matrix,
            "series": self.trajectory.series,
            "reference_step": self.reference_step,
            "end_step": self.end_step,
            "diverged_step": self.diverged_step,
            "resolution": self.trajectory.resolution,
            "first_layers": [r.layer for r in self.first],
            "first_step": self.first_step,
            "lead": self.lead,
            "precedes_divergence": None if self.lead is None else self.lead > 0,
            "order": [[r.layer, r.rise_step] for r in self.order],
            "largest_growth_layer": None if big is None else big.layer,
            "largest_growth": None if big is None else big.growth,
            "layers": [vars(r) for r in self.layers],
            "note": self.note or None,
        }


def trajectories(cell: DigestCell, horizon: int | None = None) -> dict[str, Trajectory]:
    """W_Q and W_K per-layer series (the whole-matrix norm, else the largest head's)."""
    out = {}
    records = [r for r in cell.spectral if horizon is None or r.step < horizon]
    for matrix, names in MATRICES.items():
        for name in names:
            rows = [(r.step, getattr(r, name)) for r in records if getattr(r, name) is not None]
            if rows:
                steps, values = zip(*rows, strict=True)
                out[matrix] = Trajectory(matrix, name, tuple(steps), tuple(values))
                break
    return out


def rise(
    cell: DigestCell, trajectory: Trajectory, rule: RiseRule, horizon: int | None = None
) -> RiseResult:
    diverged = cell.diverged_step
    if diverged is not None and horizon is not None and diverged >= horizon:
        diverged = None
    wanted = rule.reference_for(cell)
    ref = next((s for s in trajectory.steps if s >= wanted), None)
    before = [s for s in trajectory.steps if diverged is None or s < diverged]
    end = before[-1] if before else None
    if ref is None:
        note = f"no spectral record at or after step {wanted}"
        return RiseResult(cell, trajectory, rule, None, end, diverged, note=note)
    layers = []
    for i in range(trajectory.layers):
        series = dict(trajectory.layer(i))
        base = series.get(ref)
        if base is None or base <= 0:
            continue
        rise_step = next(
            (s for s, v in sorted(series.items()) if s > ref and v >= rule.factor * base), None
        )
        last = series.get(end) if end is not None and end >= ref else None
        growth = None if last is None else last / base
        layers.append(LayerRise(i, base, rise_step, growth, last))
    note = "" if layers else f"no finite spectral norm at the reference step {ref}"
    return RiseResult(cell, trajectory, rule, ref, end, diverged, tuple(layers), note)


def rises(
    cells: Sequence[DigestCell], rule: RiseRule, horizon: int | None = None
) -> list[RiseResult]:
    """Per cell and matrix (W_Q, then W_K), for the cells with spectral records."""
    return [
        rise(cell, trajectory, rule, horizon)
        for cell in cells
        for trajectory in trajectories(cell, horizon).values()
    ]
