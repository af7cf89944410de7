"""`flashprobe suites` and `ablate --dry-run` on a machine that cannot run the suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_suites_lists_every_bundled_suite_within_100_columns(run_cli) -> None:
    result = run_cli("suites")
    assert result.code == 0, result.err
    assert max(len(line) for line in result.out.splitlines()) <= 100
    shipped = sorted(p.stem for p in (ROOT / "ablations").glob("*.yaml"))
    rows = json.loads(run_cli("suites", "--format", "json").out)
    assert [r["suite"] for r in rows] == shipped
    smoke = next(r for r in rows if r["suite"] == "smoke")
    assert smoke["tokens"] == 163_840 and smoke["cells"] == 10 and "cpu" in smoke["time"]
    quick = next(r for r in rows if r["suite"] == "quick")
    assert quick["tokens"] == 2 * 3400 * 32 * 1024 and "min on H200" in quick["time"]


def test_ablate_finds_a_bundled_suite_by_name(run_cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    plan = run_cli("ablate", "--config", "smoke.yaml", "--dry-run")
    assert plan.code == 0, plan.err
    assert "10 of 10 cells to train (0 finished): 164k tokens." in plan.out
    # smoke's cells stop at a divergence, so the time is a bound, and says so
    assert "every cell to its last step (one that diverges stops sooner)" in plan.out
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_a_dry_run_reports_what_only_the_target_machine_can_check(run_cli, tmp_path) -> None:
    store = tmp_path / "store"
    args = ("ablate", "-c", "gpt2", "--store", str(store))
    refused = run_cli(*args)
    assert refused.code == 2 and "no CUDA GPU" in refused.err
    plan = run_cli(*args, "--dry-run")
    assert plan.code == 0, plan.err
    problems = plan.out.split("Not checked here", 1)[1]
    assert "train.device is cuda but this machine has no CUDA GPU" in problems
    assert "data.path data/openwebtext: no train.bin there" in problems
    assert "paper-code@4000" in plan.out and "77.6G tokens" in plan.out
    as_json = run_cli(*args, "--dry-run", "--format", "json")
    assert as_json.code == 0 and json.loads(as_json.out)[0]["tokens"] == 20000 * 512 * 1024
    assert "not checked here: train.device is cuda" in as_json.err
    assert not store.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_a_dry_run_lists_a_replay_backend_this_machine_lacks(run_cli, tmp_path) -> None:
    args = ("ablate", "-c", "gpu-smoke", "--store", str(tmp_path / "store"))
    plan = run_cli(*args, "--dry-run")
    assert plan.code == 0, plan.err
    assert "- replay: backend triton needs a CUDA GPU" in plan.out
    cpu = ("--set", "train.device=cpu", "--set", "model.attention.backend=emulator")
    refused = run_cli(*args, *cpu)  # the real run still refuses the replay backend
    assert refused.code == 2 and "backend triton needs a CUDA GPU" in refused.err
    assert not (tmp_path / "store").exists()


def test_a_dry_run_still_refuses_a_bad_suite(run_cli, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("base: {train: {steps: 0}}\n")
    result = run_cli("ablate", "-c", str(path), "--dry-run")
    assert result.code == 2 and "train.steps" in result.err
