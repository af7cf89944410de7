"""scripts/device/spread.sh: cells dealt over the GPUs in turn, each GPU's cells in order, the
exit status non-zero when a cell fails (the others still run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from queue_harness import DEVICE, ROOT, shim

RECORD_ENV = """#!{python} -S
import json, os, sys
with open(os.environ["SPREAD_CALLS"], "a") as calls:
    calls.write(json.dumps([os.environ.get("CUDA_VISIBLE_DEVICES"), *sys.argv[1:]]) + "\\n")
sys.exit(1 if "broken" in sys.argv else 0)
"""


def spread(
    tmp_path: Path, gpus: int, cells: str, *options: str, **env_extra: str
) -> tuple[int, list[list[str]]]:
    bin_dir = tmp_path / "bin"
    shim(bin_dir, "python3", RECORD_ENV.format(python=sys.executable))
    shim(bin_dir, "nvidia-smi", "#!/bin/sh\n" + "".join(f"echo {i}\n" for i in range(gpus)))
    calls = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "SPREAD_CALLS": str(calls), "STORE": str(tmp_path / "store"), **env_extra}  # fmt: skip
    result = subprocess.run(
        ["bash", str(DEVICE / "spread.sh"), "ablations/quick.yaml", cells, *options],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    lines = calls.read_text().splitlines() if calls.exists() else []
    return result.returncode, [json.loads(line) for line in lines]


def cell_of(call: list[str]) -> str:
    return f"{call[call.index('--variant') + 1]}:{call[call.index('--set') + 1][7:-1]}"


def test_cells_are_dealt_over_the_gpus_in_turn(tmp_path: Path) -> None:
    code, calls = spread(tmp_path, 2, "fa2:0 paper-code:0 fa2:1 paper-code:1 fa2:2", "--jobs", "1")
    assert code == 0
    by_gpu = {gpu: [cell_of(c) for c in calls if c[0] == gpu] for gpu in ("0", "1")}
    assert by_gpu == {"0": ["fa2:0", "fa2:1", "fa2:2"], "1": ["paper-code:0", "paper-code:1"]}
    first = calls[0]
    assert first[1:6] == ["-m", "flashprobe", "ablate", "-c", "ablations/quick.yaml"]
    assert first[-5:] == ["--jobs", "1", "--no-replay", "--store", str(tmp_path / "store")]


def test_one_gpu_trains_the_cells_in_order(tmp_path: Path) -> None:
    code, calls = spread(tmp_path, 1, "fa2:3 fa2:1 paper-code:2")
    assert code == 0 and [c[0] for c in calls] == ["0"] * 3
    assert [cell_of(c) for c in calls] == ["fa2:3", "fa2:1", "paper-code:2"]
    # one process a cell, whatever the suite's jobs: (quick.yaml says 2)
    assert all(c[c.index("--jobs") + 1] == "1" for c in calls)


def test_a_failed_cell_fails_the_call_and_the_others_run(tmp_path: Path) -> None:
    code, calls = spread(tmp_path, 2, "broken:0 fa2:0 fa2:1 fa2:2")
    assert code == 1
    assert sorted(cell_of(c) for c in calls) == ["broken:0", "fa2:0", "fa2:1", "fa2:2"]


def test_cells_that_would_pass_the_deadline_are_skipped(tmp_path: Path) -> None:
    now = int(time.time())
    code, calls = spread(tmp_path, 1, "fa2:0 fa2:1", DEADLINE=str(now + 20), CELL_SECONDS="60")
    assert code == 0 and calls == []
    code, calls = spread(tmp_path, 1, "fa2:2", DEADLINE=str(now + 600), CELL_SECONDS="60")
    assert code == 0 and [cell_of(c) for c in calls] == ["fa2:2"]


def test_before_deadline_runs_or_skips_a_line(tmp_path: Path) -> None:
    script, now = DEVICE / "before_deadline.sh", int(time.time())

    def run(deadline: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "DEADLINE"}
        if deadline is not None:
            env["DEADLINE"] = deadline
        return subprocess.run(["bash", str(script), *args], env=env, capture_output=True,
                              text=True, timeout=30, check=False)  # fmt: skip

    ran = run(str(now + 600), "60", "echo", "ran")
    assert (ran.returncode, ran.stdout) == (0, "ran\n")
    skipped = run(str(now + 20), "60", "echo", "ran")
    assert skipped.returncode == 0
    skip_line = "before_deadline.sh: skipped (60 s would pass the deadline): echo ran\n"
    assert skipped.stdout == skip_line
    assert run(None, "60", "sh", "-c", "exit 3").returncode == 3  # no deadline: always runs
    assert run(None, "60").returncode == 2
