"""scripts/device/queue.sh and collect.sh run on this machine: each queue gets its own state
folder (FLASHPROBE_QUEUE_STATE) under a test's tmp_path, and a queue still running when the
test ends is stopped through the pid file queue.sh writes (conftest.py's fixture)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEVICE = ROOT / "scripts" / "device"
# Variables of the device scripts and queue files that the calling shell must not leak in.
SCRIPT_VARIABLES = ("OUT", "WAIT", "STORES", "STORE", "VARIANTS", "FLASHPROBE_GIT_SHA")


@dataclass
class DeviceQueue:
    """One queue state folder and the environment the scripts run under."""

    state: Path
    env: dict[str, str]

    def start(self, queue_file: Path, **env: str) -> str:
        """queue.sh QUEUE_FILE from the repository root (`env`: more variables for this call
        only); returns its one line of output."""
        result = subprocess.run(
            ["bash", str(DEVICE / "queue.sh"), str(queue_file)],
            cwd=ROOT, env={**self.env, **env}, capture_output=True, text=True, timeout=30,
            check=True,
        )  # fmt: skip
        return result.stdout

    def wait_done(self, timeout: float = 20.0) -> str:
        """Wait for the done marker; returns the queue log."""
        end = time.monotonic() + timeout
        while not (self.state / "done").exists():
            assert time.monotonic() < end, f"queue not done after {timeout} s:\n{self.log()}"
            time.sleep(0.05)
        return self.log()

    def collect(self, out: Path, stores: str, wait: int) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "OUT": str(out), "STORES": stores, "WAIT": str(wait)}
        return subprocess.run(
            ["bash", str(DEVICE / "collect.sh")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=wait + 60, check=False,
        )  # fmt: skip

    def log(self) -> str:
        path = self.state / "queue.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        """Stop the queue's process group if it still runs (a test that failed mid-way)."""
        pid_file = self.state / "pid"
        if pid_file.exists() and not (self.state / "done").exists():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            except ProcessLookupError:
                pass


def shim(folder: Path, name: str, script: str) -> Path:
    """An executable `name` in `folder` (put first on PATH to stand in for a program)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(script)
    path.chmod(0o755)
    return path


def make_queue(folder: Path, path_first: Path | None = None) -> DeviceQueue:
    """A queue with its state (and the corpus cache) under `folder`; `path_first`: a folder of
    stand-ins put first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARIABLES}
    env["FLASHPROBE_QUEUE_STATE"] = str(folder / "state")
    env["FLASHPROBE_CACHE"] = str(folder / "cache")
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env['PATH']}"
    return DeviceQueue(folder / "state", env)
