"""Divergence rules over the per-step training loss.

- nonfinite: the loss (or the gradient norm) is NaN or ±Inf: fires at once, ignoring
  min_step and patience.
- rise: the loss exceeds rise_factor × its running minimum and/or the running minimum +
  rise_margin (the minimum over the last rise_window steps, or the whole run).
- spike: the loss exceeds mean + spike_sigma · std of the previous spike_window losses
  (OLMo-style; needs a full window first).

rise and spike must hold on `patience` consecutive steps from `min_step` on; the divergence step
reported is the last of them (0-based), the step at which the rule fires. With `nonfinite` off, a
non-finite step is skipped: it neither extends nor breaks a rise or spike streak, and enters
neither the running minimum nor the spike window. The monitor's state is plain JSON
(`state_dict`), so a resumed run judges exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from flashprobe.train.config import DivergenceConfig


@dataclass(frozen=True)
class Divergence:
    step: int
    rule: str  # "nonfinite", "rise" or "spike"
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "rule": self.rule, "detail": self.detail}


class DivergenceMonitor:
    def __init__(self, config: DivergenceConfig) -> None:
        self.config = config
        self.history: deque[float] = deque(maxlen=self._history_length())
        self.run_min = math.inf  # over the whole run, for rise_window None
        self.streaks = {"rise": 0, "spike": 0}
        self.first: Divergence | None = None

    def _history_length(self) -> int:
        needed = self.config.spike_window if self.config.spike_sigma is not None else 1
        if self.config.rise_window is not None:
            needed = max(needed, self.config.rise_window)
        return needed

    def update(self, step: int, loss: float, grad_norm: float | None = None) -> Divergence | None:
        """Judge one step's loss; returns the divergence it reveals (each rule once per streak)."""
        if not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm)):
            if self.config.nonfinite:
                return self._found(step, "nonfinite", f"loss {loss}, grad norm {grad_norm}")
            return None
        verdicts = []
        if step >= self.config.min_step:
            verdicts = [v for v in (self._rise(loss), self._spike(loss)) if v is not None]
        self.history.append(loss)
        self.run_min = min(self.run_min, loss)
        for rule, detail in verdicts:
            if self.streaks[rule] == self.config.patience:
                return self._found(step, rule, detail)
        return None

    def _rise(self, loss: float) -> tuple[str, str] | None:
        cfg = self.config
        if cfg.rise_factor is None and cfg.rise_margin is None:
            return None
        if cfg.rise_window is None:
            floor = self.run_min
        else:
            recent = list(self.history)[-cfg.rise_window :]
            floor = min(recent) if recent else math.inf
        fired = math.isfinite(floor) and (
            (cfg.rise_factor is not None and loss > cfg.rise_factor * floor)
            or (cfg.rise_margin is not None and loss > floor + cfg.rise_margin)
        )
        return self._streak("rise", fired, f"loss {loss:.4g} vs running min {floor:.4g}")

    def _spike(self, loss: float) -> tuple[str, str] | None:
        cfg = self.config
        if cfg.spike_sigma is None:
            return None
        window = list(self.history)[-cfg.spike_window :]
        fired = False
        mean = std = 0.0
        if len(window) == cfg.spike_window:
            mean = sum(window) / len(window)
            std = math.sqrt(sum((x - mean) ** 2 for x in window) / (len(window) - 1))
            fired = loss > mean + cfg.spike_sigma * std
        return self._streak(
            "spike", fired, f"loss {loss:.4g} > mean {mean:.4g} + {cfg.spike_sigma}σ ({std:.3g})"
        )

    def _streak(self, rule: str, fired: bool, detail: str) -> tuple[str, str] | None:
        self.streaks[rule] = self.streaks[rule] + 1 if fired else 0
        return (rule, detail) if fired else None

    def _found(self, step: int, rule: str, detail: str) -> Divergence:
        found = Divergence(step, rule, detail)
        if self.first is None:
            self.first = found
        return found

    # -- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "history": list(self.history),
            "run_min": self.run_min if math.isfinite(self.run_min) else None,
            "streaks": dict(self.streaks),
            "first": self.first.to_dict() if self.first else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = deque(state["history"], maxlen=self._history_length())
        self.run_min = math.inf if state["run_min"] is None else state["run_min"]
        self.streaks = dict(state["streaks"])
        self.first = Divergence(**state["first"]) if state["first"] else None
