"""Learning rate as a pure function of the step (so resuming needs no scheduler state)."""

from __future__ import annotations

import math

from flashprobe.train.config import ScheduleConfig


def lr_at(step: int, peak_lr: float, schedule: ScheduleConfig, total_steps: int) -> float:
    """The lr of optimizer step `step` (0-based)."""
    if step < schedule.warmup_steps:
        return peak_lr * (step + 1) / schedule.warmup_steps
    if schedule.kind == "constant":
        return peak_lr
    decay_end = schedule.decay_steps if schedule.decay_steps is not None else total_steps
    span = decay_end - schedule.warmup_steps
    if span <= 0 or step >= decay_end:
        return schedule.min_lr
    progress = (step - schedule.warmup_steps) / span
    return schedule.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (
        peak_lr - schedule.min_lr
    )
