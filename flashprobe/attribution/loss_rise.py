"""How far a run's loss rose above its running minimum and stayed there: the loss rule's own
quantity, as a number.

The divergence rule `rise_margin` (train.divergence) says yes or no: the loss stood above its
running minimum + margin for `patience` steps. A run it let pass may still have risen most of
the way (AdamW, quick.yaml: `paper-code` seeds 5–7 held +0.41 to +0.50 by 3,400 steps where
`fa2` and fp32 attention held at most +0.18 on any seed: docs/findings.md). `held_loss_rise`
gives that number, so a report shows "explode vs not" in the loss beside the rule's verdict.

Read on the logged records (every `log_every` steps), as the reports see a run: the rise held
on ceil(patience / log_every) records in a row from the rule's `min_step`, each measured from
the running minimum before it, as the rule measures. Descriptive only: it changes no outcome or
count.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from flashprobe.train.config import DivergenceConfig, MetricsConfig


def held_records(config: Mapping[str, Any] | None) -> tuple[int, int]:
    """(min_step, records in a row) of a cell config's loss rule as its logged records read it
    (the config classes' defaults where the config says nothing)."""
    config = config or {}
    divergence = config.get("divergence") or {}
    metrics = config.get("metrics") or {}
    patience = _positive_int(divergence.get("patience"), DivergenceConfig.patience)
    log_every = _positive_int(metrics.get("log_every"), MetricsConfig.log_every)
    min_step = _positive_int(divergence.get("min_step"), DivergenceConfig.min_step)
    return min_step, max(1, math.ceil(patience / log_every))


def held_loss_rise(
    records: Iterable[tuple[int, float | None]],
    *,
    min_step: int = 0,
    in_a_row: int = 1,
    last_step: int | None = None,
) -> float | None:
    """The largest rise of the loss above its running minimum that held on `in_a_row` logged
    records in a row, all at or after `min_step` (and at or before `last_step`): over such
    windows, the largest of their smallest excess over the minimum of every earlier record.
    A rise_margin rule with that patience fires on these records iff this exceeds its margin
    (train.divergence: each step against the minimum before it). 0.0 when the loss never stood
    above its minimum so long; None without a window. A missing or non-finite loss is skipped,
    as the rule skips it with `nonfinite` off (with it on, the rule has fired there anyway)."""
    running_min = math.inf
    excess: deque[float] = deque(maxlen=in_a_row)  # the window: loss − the minimum before it
    best: float | None = None
    for step, loss in records:
        if last_step is not None and step > last_step:
            break
        if loss is None or not math.isfinite(loss):
            continue
        if step >= min_step:
            excess.append(loss - running_min)
            if len(excess) == in_a_row:
                rise = max(0.0, min(excess))  # -inf (no earlier record) counts as no rise
                best = rise if best is None else max(best, rise)
        running_min = min(running_min, loss)
    return best


def _positive_int(value: Any, default: int) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else default  # min_step 0 is its default too
