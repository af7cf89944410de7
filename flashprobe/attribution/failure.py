"""What counts as a failed run when the ranking compares variants (a suite's `failure:` section).

    failure: {event: divergence}                                  # the default
    failure: {event: logit-runaway, logit_limit: 1000, layers: [1]}
    failure: {event: logit-runaway, horizon: 2500}                # counted after 2,500 steps
    failure: {event: gradient-runaway}

divergence      the run's own divergence rule fired (train.divergence; summary.diverged).
logit-runaway   a sampled max attention logit (of `layers`, default every layer, any head) went
                above `logit_limit` or was not finite, or the run diverged before that. Under
                Muon the numerics decide when the logits run away long before the loss follows
                (docs/research-log.md, "Muon at lr 1.4e-2"), so this is the event a 10-minute
                run can see.
gradient-runaway
                the run diverged, or its logged gradient norm reached 100× the median of its
                earlier ones (attribution.runaway; a branched run's own steps only). Under AdamW
                at the GPT-2 shape some seeds blow up slowly: the gradient norm runs away and the
                loss climbs, short of the loss rule by the horizon (docs/findings.md). Declare
                it before the runs: chosen after seeing them, it is a forking path.

A run counts once it finished, or once it failed (a run cut off after its failure has a known
outcome; one cut off before has none). A run cut off without a summary after its divergence
rule fired (`divergence.stop: false`, or killed before it wrote summary.json) failed at the
divergence its metrics recorded, as digest-report reads it.

With a `horizon` H (report --horizon), the outcome is the one after H steps: steps are 0-based,
so those are steps 0 … H − 1, the steps a run of `train.steps: H` trains. Runs of different
lengths then compare fairly: a failure at step H or later does not count (a run of H steps
never reached it), and a run counts once it failed before step H or trained H steps (one that
ended sooner without failing has no outcome there). A branched cell trained only from its
branch step: its steps before that are its source's, read from the source's metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe.attribution.runaway import RUNAWAY_FACTOR, gradient_runaway
from flashprobe.errors import FlashprobeError
from flashprobe.store import reader as sr

EVENTS = ("divergence", "logit-runaway", "gradient-runaway")
KEYS = ("event", "logit_limit", "layers", "horizon")


@dataclass(frozen=True)
class FailureRule:
    event: str = "divergence"
    logit_limit: float = 1000.0
    layers: tuple[int, ...] | None = None  # None: every layer
    horizon: int | None = None  # None: as far as each run went

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise FlashprobeError(
                f"failure.event must be one of {', '.join(EVENTS)}, got {self.event!r}"
            )
        if not (math.isfinite(self.logit_limit) and self.logit_limit > 0):
            raise FlashprobeError(f"failure.logit_limit must be > 0, got {self.logit_limit}")
        if self.layers is not None and (not self.layers or min(self.layers) < 0):
            shown = ", ".join(map(str, self.layers)) or "none"
            raise FlashprobeError(f"failure.layers must be layer indices >= 0, got {shown}")
        if self.horizon is not None and (isinstance(self.horizon, bool) or self.horizon < 1):
            raise FlashprobeError(f"failure.horizon must be a step count >= 1, got {self.horizon}")

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
        layers, horizon = section.get("layers"), section.get("horizon")
        if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, int)):
            raise FlashprobeError(f"failure.horizon must be a step count >= 1, got {horizon!r}")
        try:
            return cls(
                event=str(section.get("event", "divergence")),
                logit_limit=float(section.get("logit_limit", 1000.0)),
                layers=None if layers is None else tuple(int(x) for x in _listed(layers)),
                horizon=horizon,
            )
        except (TypeError, ValueError) as err:
            raise FlashprobeError(f"bad failure section {dict(section)}: {err}") from None

    def check_layers(self, n_layer: int) -> None:
        """Refuse a layer the model does not have: a rule on it could never fire."""
        for layer in self.layers or ():
            if layer >= n_layer:
                raise FlashprobeError(
                    f"failure.layers: layer {layer} out of range 0..{n_layer - 1}"
                )

    @property
    def noun(self) -> str:
        return self.event.replace("-", " ")

    def describe(self) -> str:
        by = "" if self.horizon is None else f" within its first {self.horizon} steps"
        if self.event == "divergence":
            return f"the run's divergence rule fired{by}"
        if self.event == "gradient-runaway":
            return (f"the run's divergence rule fired, or its gradient norm reached "
                    f"{RUNAWAY_FACTOR:g}× the median of its earlier logged norms{by}")  # fmt: skip
        where = "any layer" if self.layers is None else f"layer {', '.join(map(str, self.layers))}"
        return (
            f"the max attention logit of {where} went above {self.logit_limit:g} (or was not "
            f"finite), or the run diverged first{by}"
        )

    def step(
        self, summary: Mapping[str, Any] | None, records: Iterable[Mapping[str, Any]]
    ) -> int | None:
        """The step at which this run failed (None: it did not, as far as it went or within the
        horizon's steps: 0-based, a failure at step `horizon` is one step past them)."""
        diverged = None
        if summary and summary.get("diverged") and summary.get("diverged_step") is not None:
            diverged = int(summary["diverged_step"])
        runaway = None
        if self.event == "logit-runaway":
            runaway = next((int(r.get("step", 0)) for r in records if self._runs_away(r)), None)
        elif self.event == "gradient-runaway":
            found = gradient_runaway((int(r.get("step", 0)), r.get("grad_norm")) for r in records)
            runaway = None if found is None else found.step
        failed = min((s for s in (diverged, runaway) if s is not None), default=None)
        return None if failed is None or (self.horizon and failed >= self.horizon) else failed

    def _runs_away(self, record: Mapping[str, Any]) -> bool:
        layers = record.get("attention") or {}
        for layer, stats in layers.items():
            if self.layers is not None and int(layer) not in self.layers:
                continue
            for value in stats.get("max_logit") or []:
                if value is None or not math.isfinite(value) or value > self.logit_limit:
                    return True  # None: the recorder's NaN
        return False


def failure_steps(
    cells: Sequence[sr.CellView], rule: FailureRule, sources: Sequence[sr.CellView] = ()
) -> dict[Path, int | None]:
    """Per cell (by folder): the step it failed at under `rule`, None if it did not. A branched
    cell's source is looked up among `cells` and `sources`."""
    if rule.event == "divergence":
        return {c.path: rule.step(outcome_summary(c), ()) for c in cells}
    if rule.event == "gradient-runaway":  # a run's own norms (attribution.runaway)
        return {c.path: rule.step(outcome_summary(c), sr.read_metrics(c)) for c in cells}
    by_key = {c.meta.get("key"): c for c in (*sources, *cells)}
    return {cell.path: rule.step(outcome_summary(cell), _history(cell, by_key)) for cell in cells}


def outcome_summary(cell: sr.CellView) -> Mapping[str, Any] | None:
    """The cell's summary; a run cut off without one: its first divergence recorded in the
    metrics (a run cut after it diverged has that outcome), else None."""
    if cell.summary is not None:
        return cell.summary
    for record in sr.read_metrics(cell):
        step = (record.get("divergence") or {}).get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            return {"diverged": True, "diverged_step": step}
    return None


def has_outcome(cell: sr.CellView) -> bool:
    """Finished, or cut off after its divergence rule fired (outcome_summary)."""
    return cell.finished or outcome_summary(cell) is not None


def counted(
    cells: Sequence[sr.CellView], failed_at: Mapping[Path, int | None], rule: FailureRule
) -> set[Path]:
    """The cells (by folder) whose outcome is known under `rule`: failed, else finished (with a
    horizon: trained at least that many steps)."""
    out = set()
    for cell in cells:
        if failed_at.get(cell.path) is not None:
            out.add(cell.path)
        elif rule.horizon is None:
            if cell.summary is not None:
                out.add(cell.path)
        elif steps_trained(cell) >= rule.horizon:
            out.add(cell.path)
    return out


def steps_trained(cell: sr.CellView) -> int:
    """Steps the run reached: its summary's steps_done, else the last logged step + 1."""
    done = (cell.summary or {}).get("steps_done")
    if isinstance(done, int):
        return done
    return max((int(r.get("step", 0)) + 1 for r in sr.read_metrics(cell)), default=0)


def _history(cell: sr.CellView, by_key: Mapping[Any, sr.CellView]) -> list[dict[str, Any]]:
    """The cell's metrics records, a branched cell's prefixed by its source's before the branch."""
    records = sr.read_metrics(cell)
    source = by_key.get(cell.meta.get("source_key"))
    branch_step = cell.meta.get("branch_step")
    if source is not None and branch_step is not None:
        earlier = [r for r in sr.read_metrics(source) if r.get("step", 0) < branch_step]
        records = earlier + records
    return records


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]
