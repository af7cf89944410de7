"""scripts/device/side_by_side.sh: cells side by side on one GPU, one store each, each digested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from queue_harness import DEVICE, ROOT, SCRIPT_VARIABLES, shim
from test_call import RECORDER


def side_by_side(tmp_path: Path, cells: str, budget: int = 30) -> tuple[str, list]:
    bin_dir, out, stores = tmp_path / "bin", tmp_path / "out", tmp_path / "stores"
    shim(bin_dir, "python3", RECORDER.format(python=sys.executable))
    shim(bin_dir, "nvidia-smi", "#!/bin/sh\necho 0\n")
    env = {k: v for k, v in os.environ.items() if k not in (*SCRIPT_VARIABLES, "BUDGET")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", CALLS=str(tmp_path / "calls.jsonl"),
               OUT=str(out), STORES=str(stores), BUDGET=str(budget))  # fmt: skip
    result = subprocess.run(
        ["bash", str(DEVICE / "side_by_side.sh"), "ablations/quick-settings.yaml", cells,
         "--set", "x=1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    return result.stdout, calls


def test_each_cell_trains_in_its_own_store_then_each_store_is_digested(tmp_path: Path) -> None:
    _, calls = side_by_side(tmp_path, "paper-code-lr-3e-3:1 fa2-lr-3e-3:5")
    ablates = sorted(
        (c for c in calls if c[3] == "ablate"), key=lambda c: c[c.index("--variant") + 1]
    )
    assert [(c[c.index("--variant") + 1], c[c.index("--store") + 1]) for c in ablates] == [
        ("fa2-lr-3e-3", str(tmp_path / "stores" / "fa2-lr-3e-3-5")),
        ("paper-code-lr-3e-3", str(tmp_path / "stores" / "paper-code-lr-3e-3-1")),
    ]
    assert all("seeds=[" in " ".join(c[1:]) and "x=1" in c and "--no-replay" in c for c in ablates)
    assert all(c[c.index("--jobs") + 1] == "1" for c in ablates)  # not the suite's jobs:
    digests = [c for c in calls if c[3] == "digest"]
    assert sorted(c[5] for c in digests) == [
        str(tmp_path / "out" / "fa2-lr-3e-3-5.json"),
        str(tmp_path / "out" / "paper-code-lr-3e-3-1.json"),
    ]
    assert all(calls.index(d) > max(calls.index(a) for a in ablates) for d in digests)


def test_a_cell_past_the_budget_is_stopped_and_still_digested(tmp_path: Path) -> None:
    stdout, calls = side_by_side(tmp_path, "slow:0", budget=1)
    assert "cells done or stopped after" in stdout
    assert [c[3] for c in calls] == ["ablate", "digest"]
