"""digest.rise: the threshold rule and the largest growth on synthetic spectral records."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.rise import RiseRule, rise, rises, trajectories

# W_Q per layer at steps 0, 100, ..., 600: layer 2 doubles first (at 300), layer 0 at 500
# (after the divergence at 450), layer 1 never.
WQ = {
    0: [1.0, 1.0, 1.1, 1.2, 1.5, 2.0, 2.5],
    1: [1.0, 1.0, 1.0, 1.1, 1.2, 1.3, 1.4],
    2: [1.0, 1.0, 1.5, 2.0, 3.0, 3.5, 4.0],
}
WK = {0: [1.0] * 7, 1: [1.0, 1.0, 2.5, 2.5, 2.5, 2.5, 2.5], 2: [1.0, 1.0, 2.1, 2.2, 2.2, 2.2, 2.2]}


def _records(wq=WQ, wk=WK, head=False):
    out = []
    for j, step in enumerate(range(0, 700, 100)):
        record = {"step": step, "wk": [wk[i][j] for i in sorted(wk)]}
        record["wq_head_max" if head else "wq"] = [wq[i][j] for i in sorted(wq)]
        out.append(record)
    return out


def _cell(tmp_path: Path, make, **kwargs):
    path = make.digest(tmp_path / "d.json", [make.cell("a", 0, **kwargs)])
    return load_digest(path).cells[0]


def test_threshold_rise_order_lead_and_growth(tmp_path: Path, make) -> None:
    cell = _cell(tmp_path, make, planned=700, diverged=450, spectral=_records())
    series = trajectories(cell)
    assert series["W_Q"].series == "wq" and series["W_Q"].resolution == 100
    assert series["W_Q"].layer(2)[:2] == [(0, 1.0), (100, 1.0)]
    result = rise(cell, series["W_Q"], RiseRule(factor=2.0, reference_step=100))
    assert result.reference_step == 100 and result.end_step == 400
    assert [(r.layer, r.rise_step) for r in result.order] == [(2, 300), (0, 500)]
    assert [r.layer for r in result.first] == [2] and result.first_step == 300
    assert result.lead == 150  # 450 - 300: the rise came first
    assert result.largest_growth.layer == 2 and result.largest_growth.growth == pytest.approx(3.0)
    by_layer = {r.layer: r for r in result.layers}
    assert by_layer[1].rise_step is None and by_layer[1].growth == pytest.approx(1.2)
    data = result.to_dict()
    assert data["precedes_divergence"] is True and data["first_layers"] == [2]


def test_layers_rising_at_one_record_are_ordered_by_ratio(tmp_path: Path, make) -> None:
    cell = _cell(tmp_path, make, planned=700, diverged=150, spectral=_records())
    result = rise(cell, trajectories(cell)["W_K"], RiseRule(reference_step=100))
    assert [(r.layer, r.rise_step) for r in result.first] == [(1, 200), (2, 200)]
    assert result.lead == -50  # the rise came after the divergence at 150
    assert result.to_dict()["precedes_divergence"] is False
    assert result.end_step == 100 and result.largest_growth.growth == pytest.approx(1.0)


def test_reference_defaults_to_the_divergence_min_step(tmp_path: Path, make) -> None:
    cell = _cell(tmp_path, make, planned=700, min_step=250, spectral=_records())
    result = rise(cell, trajectories(cell)["W_Q"], RiseRule())
    assert result.reference_step == 300  # the first record at or after 250
    assert result.diverged_step is None and result.end_step == 600
    # both at 600: layer 0 by 2.5 / 1.2 = 2.08 before layer 2 by 4.0 / 2.0 = 2.0
    assert [(r.layer, r.rise_step) for r in result.order] == [(0, 600), (2, 600)]
    late = rise(cell, trajectories(cell)["W_Q"], RiseRule(reference_step=601))
    assert late.reference_step is None and "no spectral record at or after step 601" in late.note
    assert late.first == [] and late.lead is None


def test_horizon_limits_the_records(tmp_path: Path, make) -> None:
    cell = _cell(tmp_path, make, planned=700, diverged=550, spectral=_records())
    (result,) = [r for r in rises([cell], RiseRule(reference_step=0), horizon=400)
                 if r.trajectory.matrix == "W_Q"]  # fmt: skip
    assert result.trajectory.steps[-1] == 300  # 400 steps: 0-based steps 0-399
    assert result.diverged_step is None  # diverged after the horizon
    at_550 = rise(cell, trajectories(cell, 550)["W_Q"], RiseRule(reference_step=0), 550)
    assert at_550.diverged_step is None  # step 550 is past 550 steps (0-549)
    assert [(r.layer, r.rise_step) for r in result.order] == [(2, 300)]


def test_falls_back_to_the_largest_head(tmp_path: Path, make) -> None:
    cell = _cell(tmp_path, make, planned=700, spectral=_records(head=True))
    series = trajectories(cell)
    assert series["W_Q"].series == "wq_head_max" and series["W_K"].series == "wk"
    assert rises([_cell(tmp_path, make, planned=700)], RiseRule()) == []  # no records


def test_bad_rules() -> None:
    for factor in (1.0, math.inf, math.nan):  # inf would never fire; nan compares false
        with pytest.raises(FlashprobeError, match="--rise-factor"):
            RiseRule(factor=factor)
    with pytest.raises(FlashprobeError, match="--rise-from"):
        RiseRule(reference_step=-1)
