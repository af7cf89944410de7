"""scripts/device/quick_pair.sh: the quick pair as the issue is judged, timed, then its report and
digest in OUT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from queue_harness import DEVICE, ROOT, SCRIPT_VARIABLES, shim
from test_call import RECORDER


def pair(tmp_path: Path, **extra: str) -> tuple[subprocess.CompletedProcess[str], list]:
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    shim(bin_dir, "python3", RECORDER.format(python=sys.executable))
    shim(bin_dir, "nvidia-smi", "#!/bin/sh\necho 0\n")
    env = {k: v for k, v in os.environ.items() if k not in (*SCRIPT_VARIABLES, "SEED", "BUDGET")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", CALLS=str(tmp_path / "calls.jsonl"),
               OUT=str(out), STORE=str(tmp_path / "quick"))  # fmt: skip
    env.update(extra)
    result = subprocess.run(
        ["bash", str(DEVICE / "quick_pair.sh")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    calls_file = tmp_path / "calls.jsonl"
    lines = calls_file.read_text().splitlines() if calls_file.exists() else []
    return result, [json.loads(line) for line in lines]


def test_the_pair_runs_as_judged_then_is_reported_and_digested(tmp_path: Path) -> None:
    result, calls = pair(tmp_path, SEED="7")
    assert result.returncode == 0, result.stderr
    assert [c[3] for c in calls] == ["ablate", "report", "digest"]
    ablate = calls[0]
    assert ablate[4:7] == ["-c", "ablations/quick.yaml", "--set"] and "seeds=[7]" in ablate
    assert ablate[ablate.index("--jobs") + 1] == "2"
    log = (tmp_path / "out" / "pair.log").read_text()
    assert "quick_pair.sh: ablate exit 0 after" in log
    assert calls[2][5] == str(tmp_path / "out" / "quick.json")


def test_without_a_seed_nothing_runs(tmp_path: Path) -> None:
    result, calls = pair(tmp_path)
    assert result.returncode != 0 and "SEED" in result.stderr and calls == []
