"""tools/profile_call.py and tools/profile_step.py: where they cannot run, one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tools/profile_call.py"], "profile_call.py: error: needs a CUDA GPU"),
        (["tools/profile_step.py", "ablations/muon-runaway.yaml", "--variant", "paper-code",
          "--out", "{out}"], "trains on cuda and this machine has no CUDA GPU"),
    ],
)  # fmt: skip
def test_a_gpu_tool_on_a_cpu_machine_says_so(tmp_path, args, message) -> None:
    result = run_tool(*(a.format(out=tmp_path / "out") for a in args))
    assert result.returncode == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize(
    ("suite", "variant", "message"),
    [
        ("ablations/smoke.yaml", "nope", "no variant 'nope' in ablations/smoke.yaml"),
        ("missing.yaml", "fa2", "suite file not found"),
    ],
)
def test_profile_step_refuses_a_bad_suite_or_variant_in_one_line(
    tmp_path, suite, variant, message
) -> None:
    result = run_tool("tools/profile_step.py", suite, "--variant", variant, "--out",
                      str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1
