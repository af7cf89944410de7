"""scripts/device/digest_store.sh: a device call's digest comes back even when its replay
results are torn (the digest alone refuses them, as `report` does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from queue_harness import DEVICE, ROOT, SCRIPT_VARIABLES, shim
from test_queue import TINY

from flashprobe.reporting.digest.loader import load_digest


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny store of one fa2 cell (3 steps, no replay)."""
    root = tmp_path_factory.mktemp("digest_store")
    suite, store = root / "tiny.yaml", root / "store"
    suite.write_text(yaml.safe_dump(TINY))
    subprocess.run(
        [sys.executable, "-m", "flashprobe", "ablate", "-c", str(suite), "--no-replay",
         "--store", str(store)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return store


def digest_store(tmp_path: Path, store: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    shim(bin_dir, "python3", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARIABLES}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        ["bash", str(DEVICE / "digest_store.sh"), str(store), str(tmp_path / "store.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_healthy_store_is_digested_once(tmp_path: Path, trained: Path) -> None:
    result = digest_store(tmp_path, trained)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    (cell,) = load_digest(tmp_path / "store.json").cells
    assert (cell.variant, cell.steps_reached) == ("fa2", 3)


def test_a_torn_replay_is_set_aside_and_the_training_comes_back(
    tmp_path: Path, trained: Path
) -> None:
    import shutil

    store = tmp_path / "copy"
    shutil.copytree(trained, store)
    torn = store / "tiny" / "replay.json"
    torn.write_text('{"format": "flashprobe-replay", "roles"')  # cut off mid-write
    result = digest_store(tmp_path, store)
    assert result.returncode == 0, result.stderr
    assert "again without its replay.json files" in result.stderr
    assert not torn.exists() and torn.with_name("replay.json.set-aside").exists()
    (cell,) = load_digest(tmp_path / "store.json").cells
    assert (cell.variant, cell.steps_reached) == ("fa2", 3)
