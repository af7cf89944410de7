"""Ranking on synthetic outcomes and mechanism numbers whose answer is known."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from flashprobe.attribution.ranking import (
    component_diff,
    fisher_exact,
    mean_interval,
    rank,
    resolve_roles,
    wilson_interval,
)
from flashprobe.spec import make_spec


@dataclass
class FakeCell:
    variant: str
    seed: int
    config: dict[str, Any]
    summary: dict[str, Any] | None
    branch_from: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:  # what a store's cell is known by
        return f"{self.variant}/seed{self.seed}"


def config(**spec: Any) -> dict[str, Any]:
    full = make_spec({"preset": "fa2", **spec}).to_dict()
    return {"model": {"attention": {"impl": "flashprobe", "spec": full}}, "train": {"seed": 0}}


def cells(variant: str, spec: dict[str, Any], diverged: list[int | None]) -> list[FakeCell]:
    out = []
    for seed, step in enumerate(diverged):
        summary = {"diverged": step is not None, "diverged_step": step, "steps_done": 100}
        cfg = config(**spec)
        cfg["train"]["seed"] = seed
        out.append(FakeCell(variant, seed, cfg, summary))
    return out


FP32 = {"p_bar_precision": "fp32", "delta_source": "o_fp32", "ds_precision": "fp32",
        "l_from_rounded_p": True}  # fmt: skip


def suite() -> list[FakeCell]:
    return [
        *cells("baseline", {}, [40, 50, 45, 60]),
        *cells("delta-fp32", {"delta_source": "o_fp32"}, [None] * 4),  # planted: the cause
        *cells("block-m", {"block_m": 32}, [42, 51, 44, 58]),  # zero effect
        *cells("sfa", {"softmax": "stabilized"}, [None, None, 70, None]),
        *cells("safe", FP32, [None] * 4),
        *cells("safe+delta-lowp", {**FP32, "delta_source": "o_lowp"}, [30, 35, 40, None]),
    ]


MECH = {
    "baseline": {"delta_bias": 1.0},
    "delta-fp32": {"delta_bias": 0.01},
    "block-m": {"delta_bias": 1.0},
    "sfa": {"delta_bias": 0.3},
    "safe": {"delta_bias": 0.0},
    "safe+delta-lowp": {"delta_bias": 0.9},
}


def test_planted_cause_first_and_zero_effect_last() -> None:
    data = suite()
    roles = resolve_roles(data)
    assert (roles.baseline, roles.safe) == ("baseline", "safe")
    table = rank(data, roles, MECH)
    ranked = [r for r in table if r["rank"] is not None]
    order = [r["variant"] for r in ranked]
    assert order[0] == "delta-fp32"
    assert order[-1] == "block-m"
    by = {r["variant"]: r for r in table}
    assert by["delta-fp32"]["design"] == "restore"
    assert by["delta-fp32"]["component"] == "delta_source=o_fp32"
    assert by["delta-fp32"]["verdict"].startswith("necessary")
    assert by["delta-fp32"]["mechanism_share"] == pytest.approx(0.99)
    assert by["block-m"]["score"] == pytest.approx(0.0)
    assert by["block-m"]["verdict"].startswith("not necessary")
    add = by["safe+delta-lowp"]
    assert add["design"] == "add" and add["component"] == "delta_source=o_lowp"
    assert add["mechanism_share"] == pytest.approx(0.9)
    assert "more divergence, not significant" in add["verdict"]  # 3/4 vs 0/4: p = 0.14
    assert by["baseline"]["rate_lo"] == pytest.approx(wilson_interval(4, 4)[0])


def test_explicit_component_label_and_training_only() -> None:
    data = suite()
    roles = resolve_roles(data, baseline="baseline", components={"sfa": "stabilized softmax"})
    table = rank(data, roles)  # no mechanism numbers: training alone
    by = {r["variant"]: r for r in table}
    assert by["sfa"]["component"] == "stabilized softmax"
    assert by["sfa"]["mechanism_share"] is None
    assert by["sfa"]["score"] == pytest.approx(0.75)


def test_baseline_inferred_from_branch_source() -> None:
    data = suite()
    for c in data:
        if c.variant != "safe":
            c.branch_from = "safe"
    assert resolve_roles(data).baseline == "safe"


def test_statistics() -> None:
    lo, hi = wilson_interval(0, 2)
    assert lo == 0.0 and hi == pytest.approx(0.658, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert fisher_exact(0, 4, 4, 4) == pytest.approx(2 / 70)
    assert fisher_exact(2, 4, 2, 4) == pytest.approx(1.0)
    mean, lo, hi = mean_interval([10.0, 20.0])
    assert mean == 15 and lo == pytest.approx(15 - 12.706 * 5)
    assert mean_interval([3.0]) == (3.0, None, None)


def test_component_diff_ignores_seed_and_checkpoints_and_names_other_keys() -> None:
    a, b = config(block_n=None), config()
    a["train"] = {"seed": 5, "lr": 1.0, "checkpoint_every": 0}
    b["train"] = {"seed": 0, "lr": 2.0, "checkpoint_every": 500}
    assert component_diff(a, b) == {"block_n": None, "train.lr": 1.0}


def test_equal_scores_rank_the_variant_with_more_seeds_first() -> None:
    # both restores stop every failure (Δp = 1); "a-one-seed" would come first by name
    data = [
        *cells("baseline", {}, [40, 50, 45]),
        *cells("a-one-seed", {"delta_source": "o_fp32"}, [None]),
        *cells("b-three-seeds", {"block_m": 32}, [None] * 3),
        *cells("safe", FP32, [None] * 3),
    ]
    table = rank(data, resolve_roles(data, baseline="baseline", safe="safe"))
    ranked = [r["variant"] for r in table if r["rank"] is not None]
    assert ranked[:2] == ["b-three-seeds", "a-one-seed"]
