"""The GPU smoke script fails loudly where it cannot run (CPU CI checks that it is not silent)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashprobe.suites.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU failure path")
def test_gpu_smoke_exits_non_zero_without_a_gpu() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / ".ci" / "gpu-smoke")],
        capture_output=True,
        text=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert result.returncode != 0
    assert "no CUDA GPU is visible" in result.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("xdist") is not None, reason="checks the path without pytest-xdist"
)
def test_gpu_smoke_asks_for_xdist_when_told_to_run_tests_in_parallel() -> None:
    """PYTEST_WORKERS passes -n to pytest, which only pytest-xdist knows: say so first."""
    result = subprocess.run(
        ["bash", str(ROOT / ".ci" / "gpu-smoke")],
        capture_output=True,
        text=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "PYTEST_WORKERS": "2"},
        timeout=120,
    )
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "gpu-smoke: PYTEST_WORKERS needs pytest-xdist (pip install pytest-xdist), or leave it unset"
    )


def test_gpu_smoke_suite_is_valid() -> None:
    suite = load_suite(ROOT / "ablations" / "gpu-smoke.yaml")
    assert suite.variants() == ["fa2", "sfa"]
    assert all(c.config["train"]["device"] == "cuda" for c in suite.cells)
