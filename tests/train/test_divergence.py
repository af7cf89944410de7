"""Divergence rules on synthetic loss curves."""

from __future__ import annotations

import math

import numpy as np

from flashprobe.train import DivergenceConfig, DivergenceMonitor


def first_divergence(losses, **rules):
    monitor = DivergenceMonitor(DivergenceConfig(**rules))
    for step, loss in enumerate(losses):
        found = monitor.update(step, float(loss))
        if found is not None:
            return found
    return None


def smooth_curve(n: int = 2000, seed: int = 0) -> np.ndarray:
    """A healthy run: exponential decay from 5.5 to 1.0 plus 2% noise."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n)
    return (1.0 + 4.5 * np.exp(-steps / 300)) * (1 + 0.02 * rng.standard_normal(n))


ALL_RULES = {"rise_factor": 1.5, "rise_margin": 1.0, "spike_sigma": 6.0, "spike_window": 128}


def test_no_false_alarm_on_a_smooth_decreasing_curve() -> None:
    for seed in range(5):
        assert first_divergence(smooth_curve(seed=seed), **ALL_RULES) is None


def test_nan_and_inf_fire_immediately() -> None:
    losses = [3.0, 2.9, math.nan]
    found = first_divergence(losses, min_step=100, patience=5)
    assert found is not None and (found.step, found.rule) == (2, "nonfinite")
    assert first_divergence([3.0, math.inf]).rule == "nonfinite"
    monitor = DivergenceMonitor(DivergenceConfig())
    assert monitor.update(0, 3.0, grad_norm=math.nan).rule == "nonfinite"


def test_nonfinite_rule_can_be_switched_off() -> None:
    assert first_divergence([3.0, math.nan], nonfinite=False) is None


def test_rise_factor_over_the_running_minimum() -> None:
    losses = [4.0, 3.0, 2.0, 2.5, 3.9, 4.1]
    found = first_divergence(losses, rise_factor=2.0)
    assert found is not None and (found.step, found.rule) == (5, "rise")


def test_rise_margin_and_patience() -> None:
    losses = [2.0, 1.5, 2.6, 1.6, 2.7, 2.8, 2.9]
    assert first_divergence(losses, rise_margin=1.0).step == 2
    assert first_divergence(losses, rise_margin=1.0, patience=3).step == 6


def test_rise_window_forgets_old_minima() -> None:
    losses = [1.0] + [2.5] * 10
    assert first_divergence(losses, rise_factor=2.0).step == 1
    # With a 3-step window the old 1.0 minimum leaves before patience runs out.
    assert first_divergence(losses, rise_factor=2.0, rise_window=3, patience=4) is None


def test_k_sigma_spike_after_a_full_window() -> None:
    rng = np.random.default_rng(1)
    losses = list(3.0 + 0.01 * rng.standard_normal(200))
    losses[150] = 3.2  # 20σ
    found = first_divergence(losses, spike_sigma=6.0, spike_window=128)
    assert found is not None and (found.step, found.rule) == (150, "spike")
    losses[150] = 3.0
    losses[100] = 3.5  # before a full window: ignored
    assert first_divergence(losses, spike_sigma=6.0, spike_window=128) is None


def test_min_step_ignores_early_steps() -> None:
    losses = [5.0, 2.0, 4.5, 2.0, 2.1]
    assert first_divergence(losses, rise_factor=2.0).step == 2
    assert first_divergence(losses, rise_factor=2.0, min_step=3) is None


def test_state_round_trip_judges_like_an_uninterrupted_monitor() -> None:
    losses = list(smooth_curve(400)) + [9.0] * 5
    rules = dict(spike_sigma=6.0, spike_window=64, rise_factor=1.5, patience=2)
    whole = first_divergence(losses, **rules)
    first = DivergenceMonitor(DivergenceConfig(**rules))
    for step, loss in enumerate(losses[:300]):
        first.update(step, float(loss))
    second = DivergenceMonitor(DivergenceConfig(**rules))
    second.load_state_dict(first.state_dict())
    found = None
    for step, loss in enumerate(losses[300:], start=300):
        found = found or second.update(step, float(loss))
    assert found == whole and found is not None
