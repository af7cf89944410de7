"""What counts as a failed run when the ranking compares variants (a suite's `failure:` section).

    failure: {event: divergence}                                  # the default
    failure: {event: logit-runaway, logit_limit: 1000, layers: [1]}

divergence      the run's own divergence rule fired (train.divergence; summary.diverged).
logit-runaway   a sampled max attention logit (of `layers`, default every layer, any head) went
                above `logit_limit` or was not finite, or the run diverged before that. Under
                Muon the numerics decide when the logits run away long before the loss follows
                (README, "Muon at lr 1.4e-2"), so this is the event a 10-minute run can see.

A run counts once it finished, or once it failed (a run cut off after its failure has a known
outcome; one cut off before has none). A branched cell trained only from its branch step: its
steps before that are its source's, read from the source's metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.experiments import store_reader as sr

EVENTS = ("divergence", "logit-runaway")
KEYS = ("event", "logit_limit", "layers")


@dataclass(frozen=True)
class FailureRule:
    event: str = "divergence"
    logit_limit: float = 1000.0
    layers: tuple[int, ...] | None = None  # None: every layer

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise FlashprobeError(
                f"failure.event must be one of {', '.join(EVENTS)}, got {self.event!r}"
            )
        if not (math.isfinite(self.logit_limit) and self.logit_limit > 0):
            raise FlashprobeError(f"failure.logit_limit must be > 0, got {self.logit_limit}")
        if self.layers is not None and (not self.layers or min(self.layers) < 0):
            raise FlashprobeError(f"failure.layers must be layer indices >= 0, got {self.layers}")

    @classmethod
    def from_suite(cls, section: Any) -> FailureRule:
        """The suite's `failure:` section (None or absent: divergence)."""
        if section is None:
            return cls()
        if not isinstance(section, Mapping):
            raise FlashprobeError(f"failure must be a mapping (keys: {', '.join(KEYS)})")
        unknown = sorted(set(section) - set(KEYS))
        if unknown:
            raise FlashprobeError(f"unknown failure key {unknown[0]!r}; known: {', '.join(KEYS)}")
        layers = section.get("layers")
        try:
            return cls(
                event=str(section.get("event", "divergence")),
                logit_limit=float(section.get("logit_limit", 1000.0)),
                layers=None if layers is None else tuple(int(x) for x in _listed(layers)),
            )
        except (TypeError, ValueError) as err:
            raise FlashprobeError(f"bad failure section {dict(section)}: {err}") from None

    @property
    def noun(self) -> str:
        return "divergence" if self.event == "divergence" else "logit runaway"

    def describe(self) -> str:
        if self.event == "divergence":
            return "the run's divergence rule fired"
        where = "any layer" if self.layers is None else f"layer {', '.join(map(str, self.layers))}"
        return (
            f"the max attention logit of {where} went above {self.logit_limit:g} (or was not "
            "finite), or the run diverged first"
        )

    def step(
        self, summary: Mapping[str, Any] | None, records: Iterable[Mapping[str, Any]]
    ) -> int | None:
        """The step at which this run failed (None: it did not, as far as it went)."""
        diverged = None
        if summary and summary.get("diverged") and summary.get("diverged_step") is not None:
            diverged = int(summary["diverged_step"])
        if self.event == "divergence":
            return diverged
        runaway = next((int(r.get("step", 0)) for r in records if self._runs_away(r)), None)
        return min((s for s in (diverged, runaway) if s is not None), default=None)

    def _runs_away(self, record: Mapping[str, Any]) -> bool:
        layers = record.get("attention") or {}
        for layer, stats in layers.items():
            if self.layers is not None and int(layer) not in self.layers:
                continue
            for value in stats.get("max_logit") or []:
                if value is None or not math.isfinite(value) or value > self.logit_limit:
                    return True  # None: the recorder's NaN
        return False


def failure_steps(cells: Sequence[sr.CellView], rule: FailureRule) -> dict[Path, int | None]:
    """Per cell (by folder): the step it failed at under `rule`, None if it did not."""
    if rule.event == "divergence":
        return {c.path: rule.step(c.summary, ()) for c in cells}
    by_key = {c.meta.get("key"): c for c in cells}
    out = {}
    for cell in cells:
        records = sr.read_metrics(cell)
        source = by_key.get(cell.meta.get("source_key"))
        branch_step = cell.meta.get("branch_step")
        if source is not None and branch_step is not None:
            earlier = [r for r in sr.read_metrics(source) if r.get("step", 0) < branch_step]
            records = earlier + records
        out[cell.path] = rule.step(cell.summary, records)
    return out


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]
