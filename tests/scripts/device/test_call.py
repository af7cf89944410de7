"""scripts/device/call.sh: one device call on its own, the cells through spread.sh inside a
budget, then the store's digest whatever the cells did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from queue_harness import DEVICE, ROOT, SCRIPT_VARIABLES, shim
from test_queue import TINY

from flashprobe.reporting.digest.loader import load_digest

# python3 stand-in: records its arguments and the deadline it saw; a cell named slow sleeps
# (as a cell would train), one named broken fails.
RECORDER = """#!{python} -S
import json, os, sys, time
with open(os.environ["CALLS"], "a") as calls:
    calls.write(json.dumps([os.environ.get("DEADLINE"), *sys.argv[1:]]) + "\\n")
if "slow" in sys.argv:
    time.sleep(30)
sys.exit(1 if "broken" in sys.argv else 0)
"""


def call(
    tmp_path: Path, cells: str, budget: int, **extra: str
) -> tuple[subprocess.CompletedProcess[str], list]:
    bin_dir, out, store = tmp_path / "bin", tmp_path / "out", tmp_path / "adamw"
    shim(bin_dir, "python3", RECORDER.format(python=sys.executable))
    shim(bin_dir, "nvidia-smi", "#!/bin/sh\necho 0\n")
    store.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARIABLES}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", CALLS=str(tmp_path / "calls.jsonl"),
               OUT=str(out), STORE=str(store), BUDGET=str(budget), CELL_SECONDS="1")  # fmt: skip
    env.update(extra)
    result = subprocess.run(
        ["bash", str(DEVICE / "call.sh"), "ablations/quick.yaml", cells, "--set", "x=1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    return result, calls


def test_the_cells_train_then_the_store_is_digested_into_out(tmp_path: Path) -> None:
    start = int(time.time())
    result, calls = call(tmp_path, "fa2:0 broken:1", budget=100)
    assert result.returncode == 0, result.stderr
    ablates = [c for c in calls if c[3] == "ablate"]
    assert [c[c.index("--variant") + 1] for c in ablates] == ["fa2", "broken"]
    assert all(start + 100 <= int(c[0]) <= int(time.time()) + 100 for c in ablates)
    assert "--set" in ablates[0] and "x=1" in ablates[0]
    (digest,) = [c for c in calls if c[3] == "digest"]
    assert digest[4:6] == [str(tmp_path / "adamw"), str(tmp_path / "out" / "adamw.json")]
    log = (tmp_path / "out" / "call.log").read_text()
    assert "spread.sh exit 1" in log  # the broken cell is reported, the digest still made
    assert (tmp_path / "out" / "gpu.txt").exists()


def test_a_cell_past_the_budget_is_stopped_and_the_digest_still_made(tmp_path: Path) -> None:
    began = time.monotonic()
    result, calls = call(tmp_path, "slow:0 fa2:1", budget=2)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - began < 20
    assert [c[3] for c in calls] == ["ablate", "digest"]  # fa2:1 no longer fits
    assert "spread.sh exit 124" in (tmp_path / "out" / "call.log").read_text()


def test_then_runs_after_the_cells_inside_the_budget(tmp_path: Path) -> None:
    then = f"echo then-ran > {tmp_path / 'then.txt'}; python3 -m flashprobe replay somewhere"
    result, calls = call(tmp_path, "fa2:0", budget=100, THEN=then, THEN_SECONDS="40")
    assert result.returncode == 0, result.stderr
    assert [c[3] for c in calls] == ["ablate", "replay", "digest"]
    cells_deadline, then_seen = int(calls[0][0]), int(calls[1][0])
    assert then_seen - cells_deadline == 40  # the cells leave THEN its seconds
    assert (tmp_path / "then.txt").read_text() == "then-ran\n"
    assert "THEN exit 0" in (tmp_path / "out" / "call.log").read_text()


def test_a_real_call_trains_the_tiny_suite_and_digests_it(tmp_path: Path) -> None:
    """No stand-ins but nvidia-smi: spread.sh runs `flashprobe ablate` (this interpreter) on a
    3-step suite, then the digest comes back in OUT."""
    bin_dir, out, store = tmp_path / "bin", tmp_path / "out", tmp_path / "adamw"
    shim(bin_dir, "python3", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    shim(bin_dir, "nvidia-smi", "#!/bin/sh\necho 0\n")
    suite = tmp_path / "tiny.yaml"
    suite.write_text(yaml.safe_dump(TINY))
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARIABLES}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", OUT=str(out), STORE=str(store),
               FLASHPROBE_CACHE=str(tmp_path / "cache"))  # fmt: skip
    env.update(BUDGET="120", CELL_SECONDS="10")
    result = subprocess.run(
        ["bash", str(DEVICE / "call.sh"), str(suite), "fa2:0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "spread.sh exit 0" in (out / "call.log").read_text()
    (cell,) = load_digest(out / "adamw.json").cells
    assert (cell.variant, cell.seed, cell.finished, cell.steps_reached) == ("fa2", 0, True, 3)
