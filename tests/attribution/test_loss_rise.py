"""attribution.loss_rise: the loss's rise above its running minimum, held as long as the loss
rule's patience, as a number."""

from __future__ import annotations

import math

import pytest

from flashprobe.attribution.loss_rise import held_loss_rise, held_records
from flashprobe.train.config import DivergenceConfig
from flashprobe.train.divergence import DivergenceMonitor


def test_a_rise_counts_only_as_far_as_it_held() -> None:
    records = [(0, 3.0), (10, 1.0), (20, 1.6), (30, 1.5), (40, 1.9), (50, 1.2)]
    assert held_loss_rise(records, in_a_row=1) == pytest.approx(0.9)  # the spike at 40
    assert held_loss_rise(records, in_a_row=3) == pytest.approx(0.5)  # 1.6, 1.5, 1.9 held 0.5
    assert held_loss_rise(records, in_a_row=4) == pytest.approx(0.2)  # ... and 1.2
    assert held_loss_rise(records, in_a_row=7) is None  # no window so long


def test_a_new_minimum_is_no_rise_and_the_first_steps_set_the_minimum() -> None:
    falling = [(s, 3.0 - 0.1 * s) for s in range(10)]
    assert held_loss_rise(falling, in_a_row=2) == 0.0
    # the minimum before min_step counts; records before it are in no window
    records = [(0, 2.0), (1, 0.5), (2, 1.5), (3, 1.5), (4, 0.6)]
    assert held_loss_rise(records, min_step=2, in_a_row=2) == pytest.approx(1.0)
    assert held_loss_rise(records, min_step=3, in_a_row=2) == pytest.approx(0.1)
    assert held_loss_rise(records, min_step=4, in_a_row=2) is None


def test_last_step_ends_the_windows_and_non_finite_losses_are_skipped() -> None:
    records = [(0, 1.0), (1, 1.5), (2, 1.5), (3, math.nan), (4, 1.4), (5, 3.0)]
    assert held_loss_rise(records, in_a_row=2) == pytest.approx(0.5)  # 1.5, 1.5
    assert held_loss_rise(records, in_a_row=3) == pytest.approx(0.4)  # 1.5, 1.5, (nan), 1.4
    assert held_loss_rise(records, in_a_row=4) == pytest.approx(0.4)
    assert held_loss_rise(records, in_a_row=4, last_step=4) == 0.0  # step 0: no minimum yet
    assert held_loss_rise(records, in_a_row=5, last_step=4) is None
    assert held_loss_rise([(0, None), (1, math.inf)], in_a_row=1) is None


@pytest.mark.parametrize("patience", [1, 3, 5])
@pytest.mark.parametrize("margin", [0.2, 0.5, 1.0])
def test_the_rule_with_that_margin_fires_exactly_when_the_held_rise_exceeds_it(
    margin: float, patience: int
) -> None:
    """The number and the divergence rule read the records alike: min + margin for `patience`
    records in a row from min_step fires iff the held rise is above the margin."""
    gen = torch_free_random(7)
    for _ in range(200):
        records = [(s, 1.0 + next(gen)) for s in range(40)]
        rule = DivergenceConfig(rise_margin=margin, patience=patience, min_step=5)
        monitor = DivergenceMonitor(rule)
        fired = any(monitor.update(s, x) is not None for s, x in records)
        rise = held_loss_rise(records, min_step=5, in_a_row=patience)
        assert fired == (rise is not None and rise > margin), (records, rise)


def torch_free_random(seed: int):
    import random

    rng = random.Random(seed)
    while True:
        yield rng.uniform(-0.6, 0.6) * rng.choice([0.2, 1.0, 2.0])


def test_the_window_length_follows_the_rule_and_the_log_interval() -> None:
    config = {"divergence": {"patience": 25, "min_step": 500}, "metrics": {"log_every": 10}}
    assert held_records(config) == (500, 3)
    assert held_records({"divergence": {"patience": 1}, "metrics": {"log_every": 10}}) == (0, 1)
    assert held_records(None) == (0, 1)
    assert held_records({"divergence": {"patience": True, "min_step": "x"}}) == (0, 1)
