"""End to end on the CPU: a kernel switch (`row_sum_bias`) that biases the softmax sum makes a
small AdamW run's attention logits run away and its loss explode, and the divergence rule
catches it, while the same run without the bias trains on (ablations/sum-bias-cpu.yaml, made
small: 2 layers, 64 wide, ≈ 10 s a run on two cores; ε 9e-2 exploded at steps 486 and 643 on
seeds 0 and 1 there, and fa2's largest logit stayed at 25-32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flashprobe.runner.suite_run import SuiteRequest, run_suite
from flashprobe.store import reader as sr

SUITE = {
    "name": "injected-bias",
    "seeds": [0],
    "base": {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64,
                  "attention": {"impl": "flashprobe", "backend": "emulator"}},
        "data": {"source": "stdlib", "max_bytes": 1_000_000},
        "optimizer": {"name": "adamw", "lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.0},
        "schedule": {"kind": "constant", "warmup_steps": 20},
        "train": {"steps": 800, "batch_size": 8, "precision": "bf16", "grad_clip": 1.0,
                  "device": "cpu", "checkpoint_every": 0},
        "divergence": {"rise_margin": 1.0, "patience": 25, "min_step": 50, "stop": True},
        "metrics": {"log_every": 10, "eval_every": 0, "spectral_every": 0,
                    "attention_stats_every": 50},
        "kernel": {"preset": "fa2"},
    },
    "variants": {"fa2": {}, "biased": {"kernel": {"preset": "fa2", "row_sum_bias": 9e-2}}},
}  # fmt: skip


def _max_logit(cell: sr.CellView) -> float:
    """The largest logit over the recorded steps, layers and heads."""
    records = [r["attention"] for r in sr.read_metrics(cell) if r.get("attention")]
    return max(max(layer["max_logit"]) for r in records for layer in r.values())


@pytest.mark.slow
def test_a_softmax_sum_bias_runs_the_logits_away_and_explodes_the_loss(tmp_path: Path) -> None:
    config = tmp_path / "suite.yaml"
    config.write_text(yaml.safe_dump(SUITE))
    run_suite(SuiteRequest(config=str(config), store=tmp_path / "runs", replay=False))
    cells = {c.meta["variant"]: c for c in sr.read_cells(tmp_path / "runs")}
    control, biased = cells["fa2"], cells["biased"]
    assert control.summary["diverged"] is False and control.summary["steps_done"] == 800
    assert biased.summary["diverged"] is True and biased.summary["diverged_step"] < 800
    assert _max_logit(control) < 100 < 1_000 < _max_logit(biased)
