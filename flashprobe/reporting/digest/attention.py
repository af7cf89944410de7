"""Per-layer attention records of a run: max logit, tie events, P̄ = 1 counts and the softmax
sum's bias over time.

tie events: key tiles in which a row had more than one score within the tie tolerance of the
tile's max (the stabilized softmax's trigger, paper Fig. 13); P̄ = 1: entries of P̄ exactly 1.0
that entered P̄V (the biased-rounding condition, paper §2). Both are summed over heads per
recorded step (the sampled micro-batch); sdpa / math layers do not count them. The max logit
is the largest over heads.

ΣP − 1: the sum of the softmax the backward recomputes from the forward's lse, minus 1, the
mean over sampled rows (> 0 when a bf16 running ℓ drops the small terms: `flashprobe bias`).

A run's summary compares its first record with its last one before the divergence step (a run
that did not diverge: its last, or the last at or before the horizon). The counts depend on the
tile size (a tie is counted per key tile) and on the sampled batch: compare a variant with
itself over time, not variants of different tiles with each other.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flashprobe.reporting.digest.schema import AttentionRecord, DigestCell

FIELDS = ("max_logit", "tie_events", "p_bar_ones")
#: Max logits whose first crossing a summary reports: where `flashprobe logit-scale` finds bf16
#: scores' gradients wrong by half their size (1,000) and by more than their size (4,000).
LOGIT_THRESHOLDS = (1e3, 4e3, 1e4)


def records_until(cell: DigestCell, horizon: int | None = None) -> list[AttentionRecord]:
    return [r for r in cell.attention if horizon is None or r.step < horizon]


def layer_series(
    records: Sequence[AttentionRecord], name: str
) -> dict[int, list[tuple[int, float]]]:
    """layer → [(step, value)] of one per-layer quantity (None values left out)."""
    out: dict[int, list[tuple[int, float]]] = {}
    for record in records:
        for layer, value in sorted(getattr(record, name).items()):
            if value is not None:
                out.setdefault(layer, []).append((record.step, value))
    return out


def total_series(records: Sequence[AttentionRecord], name: str) -> list[tuple[int, float]]:
    """[(step, sum over layers)] where any layer counted it."""
    return _over_layers(records, name, sum)


def max_series(records: Sequence[AttentionRecord], name: str) -> list[tuple[int, float]]:
    """[(step, max over layers)]."""
    return _over_layers(records, name, max)


def mean_series(records: Sequence[AttentionRecord], name: str) -> list[tuple[int, float]]:
    """[(step, mean over layers)]."""
    return _over_layers(records, name, statistics.fmean)


def _over_layers(
    records: Sequence[AttentionRecord], name: str, reduce: Callable[[list[float]], float]
) -> list[tuple[int, float]]:
    out = []
    for record in records:
        values = [v for v in getattr(record, name).values() if v is not None]
        if values:
            out.append((record.step, float(reduce(values))))
    return out


@dataclass(frozen=True)
class Count:
    """A count summed over layers at one record, and the layer with the most."""

    step: int
    total: float
    top_layer: int
    top: float


@dataclass(frozen=True)
class AttentionSummary:
    cell: DigestCell
    first_step: int
    end_step: int | None
    peak_logit: tuple[float, int, int] | None  # (value, layer, step) up to end_step
    ties: tuple[Count | None, Count | None]  # first record, end record
    p_bar_ones: tuple[Count | None, Count | None]
    #: (threshold, the first recorded step up to end_step whose max logit over layers reaches
    #: it, or None)
    crossings: tuple[tuple[float, int | None], ...] = ()
    #: ΣP − 1 of the backward's softmax (softmax_sum_bias), the mean over layers, its median
    #: over the records up to end_step (None: not recorded, e.g. PyTorch attention)
    sum_bias: float | None = None

    @staticmethod
    def change(pair: tuple[Count | None, Count | None]) -> str | None:
        """'first → until (layer with the most at until)'."""
        first, end = pair
        if first is None and end is None:
            return None
        shown = " → ".join("-" if c is None else f"{c.total:.3g}" for c in pair)
        return shown if end is None else f"{shown} (layer {end.top_layer})"

    def to_dict(self) -> dict[str, Any]:
        def count(c: Count | None) -> dict[str, Any] | None:
            return None if c is None else vars(c)

        peak = self.peak_logit
        return {
            "variant": self.cell.variant,
            "seed": self.cell.seed,
            "point": self.cell.point_label or None,
            "first_step": self.first_step,
            "end_step": self.end_step,
            "peak_logit": None if peak is None else {"value": peak[0], "layer": peak[1],
                                                     "step": peak[2]},
            "ties_first": count(self.ties[0]),
            "ties_end": count(self.ties[1]),
            "p_bar_ones_first": count(self.p_bar_ones[0]),
            "p_bar_ones_end": count(self.p_bar_ones[1]),
            "logit_crossings": [{"threshold": t, "step": step} for t, step in self.crossings],
            "softmax_sum_bias_median": self.sum_bias,
        }  # fmt: skip


def summarise(cell: DigestCell, horizon: int | None = None) -> AttentionSummary | None:
    """None when the run has no attention records."""
    records = records_until(cell, horizon)
    diverged = cell.diverged_step
    before = [r for r in records if diverged is None or r.step < diverged]
    if not records:
        return None
    end = before[-1] if before else None
    peaks = [(v, layer, r.step) for r in before for layer, v in r.max_logit.items()
             if v is not None]  # fmt: skip
    first = records[0]
    return AttentionSummary(
        cell=cell,
        first_step=first.step,
        end_step=None if end is None else end.step,
        peak_logit=max(peaks, key=lambda p: (p[0], -p[2], -p[1])) if peaks else None,
        ties=(_count(first, "tie_events"), _count(end, "tie_events")),
        p_bar_ones=(_count(first, "p_bar_ones"), _count(end, "p_bar_ones")),
        crossings=tuple((t, _first_reaching(max_series(before, "max_logit"), t))
                        for t in LOGIT_THRESHOLDS),
        sum_bias=_median([v for _, v in mean_series(before, "softmax_sum_bias")]),
    )  # fmt: skip


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _first_reaching(series: Sequence[tuple[int, float]], threshold: float) -> int | None:
    return next((step for step, value in series if value >= threshold), None)


def _count(record: AttentionRecord | None, name: str) -> Count | None:
    if record is None:
        return None
    values = {k: v for k, v in getattr(record, name).items() if v is not None}
    if not values:
        return None
    top = max(values, key=lambda k: (values[k], -k))
    return Count(record.step, float(sum(values.values())), top, values[top])
