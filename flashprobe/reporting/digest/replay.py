"""A run's δ replay in a digest (format v3): the compact form of its replay.json and what the
report shows of it.

`flashprobe replay` (attribution.replay) runs every variant's kernel on the captured Q, K, V, dO
of a source run and writes STORE/<suite>/<cell>/replay.json: per (variant, step, layer, head) the
δ = rowsum(dO∘O) error against an fp64 golden and much else. The digest keeps, per replayed
variant and captured layer, per captured step (error = variant − fp64 golden, over the captured
tokens of every head of the layer):

    mean            Σ δ error / tokens: the mean δ error per row (its sign: the bias's direction)
    t               the t statistic of that mean over the layer's rows, all heads pooled (as
                    if replay_metrics had measured the heads as one): recovered from each head's
                    rows, mean and t; None where a head's spread cannot be recovered (its mean
                    and t exactly 0, or not finite)
    sum             Σ δ error over the tokens and heads of that step
    running_sum     Σ of `sum` over the captured steps up to this one (the paper's Fig. 5a)
    heads_positive  how many of the layer's heads have a positive δ error mean, of `heads`

per replayed variant, captured layer and step, the attention gradients' error (`gradients`:
dQ and dK relative L2 error against the golden over the layer's heads together, i.e. each head
weighted by the size of its exact gradient; for replays written before the records carried
those sizes, the mean of the heads' errors), and, per
variant, the summary the replay computes over every step, layer and head
(attribution.replay_summary.summarise). Digest form:

    "replay": {"source_cell": "paper-code--1a2b", "backend": "triton", "steps": [900, ...],
               "layers": [0, 1], "weight_gradient": "dW = dQᵀX", "notes": [...],
               "delta": {variant: {layer: [[step, mean, t, sum, running_sum,
                                            heads_positive, heads], ...]}},
               "gradients": {variant: {layer: [[step, dq_rel, dk_rel], ...]}},
               "summary": {variant: {"delta_bias": ..., "delta_t_max": ..., ...}}}
    ("gradients" is absent from digests written before it was added: nothing to show.)
    or {"error": "why the replay.json was not read"}
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashprobe.attribution.replay_summary import pooled_relative_error, summarise

DELTA_FIELDS = ("step", "mean", "t", "sum", "running_sum", "heads_positive", "heads")
GRADIENT_FIELDS = ("step", "dq_rel", "dk_rel")


@dataclass(frozen=True)
class GradientStep:
    """One variant's attention-gradient error on one captured (step, layer), mean over heads."""

    step: int
    dq_rel: float | None
    dk_rel: float | None


@dataclass(frozen=True)
class DeltaStep:
    """One variant's δ error on one captured (step, layer), pooled over the layer's heads."""

    step: int
    mean: float | None
    t: float | None
    sum: float | None
    running_sum: float | None
    heads_positive: int
    heads: int

    @property
    def sign(self) -> str:
        if self.mean is None:
            return "?"
        return "+" if self.mean > 0 else "−" if self.mean < 0 else "0"

    def to_list(self) -> list[Any]:
        return [getattr(self, name) for name in DELTA_FIELDS]


@dataclass(frozen=True)
class ReplayDigest:
    """A run's replay as its digest holds it (error: the replay.json was not read)."""

    source_cell: str | None = None
    backend: str | None = None
    steps: tuple[int, ...] = ()
    layers: tuple[int, ...] = ()
    weight_gradient: str | None = None
    notes: tuple[str, ...] = ()
    delta: Mapping[str, Mapping[int, tuple[DeltaStep, ...]]] = field(default_factory=dict)
    summary: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    error: str | None = None
    gradients: Mapping[str, Mapping[int, tuple[GradientStep, ...]]] = field(default_factory=dict)

    @property
    def variants(self) -> list[str]:
        return list(dict.fromkeys([*self.delta, *self.summary]))

    def rows(self, before: int | None = None) -> Iterator[tuple[str, int, DeltaStep]]:
        """(variant, layer, step) in digest order; only captures before step `before`."""
        for variant, layers in self.delta.items():
            for layer, steps in sorted(layers.items()):
                for step in steps:
                    if before is None or step.step < before:
                        yield variant, layer, step

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        return {
            "source_cell": self.source_cell,
            "backend": self.backend,
            "steps": list(self.steps),
            "layers": list(self.layers),
            "weight_gradient": self.weight_gradient,
            "notes": list(self.notes),
            "delta": {
                v: {str(layer): [s.to_list() for s in steps] for layer, steps in layers.items()}
                for v, layers in self.delta.items()
            },
            "gradients": {
                v: {str(layer): [[g.step, g.dq_rel, g.dk_rel] for g in steps]
                    for layer, steps in layers.items()}
                for v, layers in self.gradients.items()
            },
            "summary": {v: dict(row) for v, row in self.summary.items()},
        }  # fmt: skip


# -- replay.json → digest -------------------------------------------------------------------
def compact(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The digest form of one cell's replay.json (a ValueError names what does not fit)."""
    # imported here: the replay writer's modules import torch
    from flashprobe.attribution.replay_files import FORMAT as REPLAY_FORMAT

    if doc.get("format") != REPLAY_FORMAT:
        raise ValueError(f"format {doc.get('format')!r}, not {REPLAY_FORMAT}")
    records = doc.get("records")
    if not isinstance(records, list):
        raise ValueError("no records")
    pooled: dict[str, dict[int, dict[int, dict[str, Any]]]] = {}
    for rec in records:
        try:
            variant, layer, step = str(rec["variant"]), int(rec["layer"]), int(rec["step"])
            total, rows, mean = float(rec["delta_sum"]), int(rec["rows"]), rec["delta_mean"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a record without {exc}") from None
        at = (
            pooled.setdefault(variant, {})
            .setdefault(layer, {})
            .setdefault(step, {"sum": 0.0, "rows": 0, "heads": [], "positive": 0, "grads": []})
        )
        at["sum"] += total
        at["rows"] += rows
        at["heads"].append((rows, mean, rec.get("delta_t")))
        at["positive"] += int(mean is not None and mean > 0)
        at["grads"].append(
            (
                (rec.get("dq_rel"), rec.get("dq_ref_norm")),
                (rec.get("dk_rel"), rec.get("dk_ref_norm")),
            )
        )
    delta: dict[str, dict[str, list[list[Any]]]] = {}
    gradients: dict[str, dict[str, list[list[Any]]]] = {}
    for variant, layers in pooled.items():
        for layer, steps in sorted(layers.items()):
            running = 0.0
            out = delta.setdefault(variant, {}).setdefault(str(layer), [])
            grads = gradients.setdefault(variant, {}).setdefault(str(layer), [])
            for step, at in sorted(steps.items()):
                dq, dk = zip(*at["grads"], strict=True)
                grads.append([step, pooled_relative_error(dq), pooled_relative_error(dk)])
                running += at["sum"]
                out.append(
                    [
                        step,
                        at["sum"] / at["rows"] if at["rows"] else None,
                        pooled_t(at["heads"]),
                        at["sum"],
                        running,
                        at["positive"],
                        len(at["heads"]),
                    ]
                )
    return {
        "source_cell": doc.get("source_cell"),
        "backend": doc.get("backend"),
        "steps": list(doc.get("steps") or []),
        "layers": list(doc.get("layers") or []),
        "weight_gradient": doc.get("weight_gradient"),
        "notes": list(doc.get("notes") or []),
        "delta": delta,
        "gradients": gradients,
        "summary": summarise([doc]),
    }


def pooled_t(heads: Sequence[tuple[int, Any, Any]]) -> float | None:
    """t of the mean over every head's rows, from each head's (rows, mean, t) where t is its
    mean over the standard error of its rows (mechanism.signed_error: sample std): the pooled
    sum of squares is each head's within-head part, (n − 1) sd², plus n (mean − pooled mean)²."""
    total = sum(n for n, _, _ in heads)
    if total < 2 or any(m is None or not math.isfinite(m) for _, m, _ in heads):
        return None
    grand = sum(n * m for n, m, _ in heads) / total
    squares = 0.0
    for n, m, t in heads:
        if n >= 2:
            if t is None or math.isnan(t) or t == 0:
                return None  # no spread to recover: a 0 mean hides it
            sd = 0.0 if math.isinf(t) else m * math.sqrt(n) / t
            squares += (n - 1) * sd * sd
        squares += n * (m - grand) ** 2
    if squares == 0:
        return 0.0 if grand == 0 else math.copysign(math.inf, grand)
    return grand / math.sqrt(squares / (total - 1) / total)


# -- digest → ReplayDigest ------------------------------------------------------------------
def parse(raw: Any, where: str) -> ReplayDigest | None:
    """Read a cell's `replay` entry (None: the cell has none); a ValueError names what is
    malformed."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: replay is not an object")
    if raw.get("error") is not None:
        return ReplayDigest(error=str(raw["error"]))
    summary = raw.get("summary") or {}
    if not isinstance(summary, Mapping):
        raise ValueError(f"{where}: replay summary is not an object")
    delta = _per_variant_and_layer(raw, "delta", _delta_step, where)
    gradients = _per_variant_and_layer(raw, "gradients", _gradient_step, where)
    return ReplayDigest(
        source_cell=_optional_str(raw.get("source_cell")),
        backend=_optional_str(raw.get("backend")),
        steps=tuple(int(s) for s in raw.get("steps") or ()),
        layers=tuple(int(layer) for layer in raw.get("layers") or ()),
        weight_gradient=_optional_str(raw.get("weight_gradient")),
        notes=tuple(str(n) for n in raw.get("notes") or ()),
        delta=delta,
        summary={str(v): dict(row) for v, row in summary.items() if isinstance(row, Mapping)},
        gradients=gradients,
    )


def _per_variant_and_layer(
    raw: Mapping[str, Any], key: str, read_row: Any, where: str
) -> dict[str, dict[int, tuple[Any, ...]]]:
    """{variant: {layer: rows}} of raw[key] (absent: empty), each row read by `read_row`."""
    entries = raw.get(key) or {}
    if not isinstance(entries, Mapping):
        raise ValueError(f"{where}: replay {key} is not an object")
    out: dict[str, dict[int, tuple[Any, ...]]] = {}
    for variant, layers in entries.items():
        if not isinstance(layers, Mapping):
            raise ValueError(f"{where}: replay {key} of {variant} is not per layer")
        out[str(variant)] = {
            int(layer): tuple(read_row(row, where) for row in _rows(rows, where))
            for layer, rows in layers.items()
        }
    return out


def _rows(value: Any, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: replay rows are not a list")
    return value


def _delta_step(row: Any, where: str) -> DeltaStep:
    if not isinstance(row, list) or len(row) != len(DELTA_FIELDS):
        raise ValueError(f"{where}: replay delta row is not [{', '.join(DELTA_FIELDS)}]")
    step, mean, t, total, running, positive, heads = row
    mean, t, total, running = (finite_number(x) for x in (mean, t, total, running))
    return DeltaStep(int(step), mean, t, total, running, int(positive), int(heads))


def _gradient_step(row: Any, where: str) -> GradientStep:
    if not isinstance(row, list) or len(row) != len(GRADIENT_FIELDS):
        raise ValueError(f"{where}: replay gradients row is not [{', '.join(GRADIENT_FIELDS)}]")
    step, dq, dk = row
    return GradientStep(int(step), finite_number(dq), finite_number(dk))


def finite_number(value: Any) -> float | None:
    """A JSON number as a float (None for null or a non-finite value); a ValueError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"bad number {value!r}")
    return float(value) if math.isfinite(value) else None


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)
