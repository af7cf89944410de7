"""One writer per cell: the lock is exclusive across processes, names its holder, and dies with
its process (kill -9 included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from flashprobe.runner.cell_lock import CellBusy, cell_lock, lock_holder


def test_a_second_holder_is_refused_naming_the_first(tmp_path) -> None:
    folder = tmp_path / "suite" / "fa2--0123"
    assert lock_holder(folder) is None
    with cell_lock(folder):
        holder = lock_holder(folder)
        assert holder is not None and holder.startswith(f"pid {os.getpid()} on ")
        with pytest.raises(CellBusy, match=f"another process is writing it \\(pid {os.getpid()}"):
            with cell_lock(folder):  # a second open file: flock refuses it as another process
                pass
    assert lock_holder(folder) is None
    with cell_lock(folder):  # free again
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path) -> None:
    folder = tmp_path / "cell"
    code = (
        "import sys, time; from pathlib import Path;"
        "from flashprobe.runner.cell_lock import cell_lock;"
        f"lock = cell_lock(Path({str(folder)!r})); lock.__enter__();"
        "print('held', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert lock_holder(folder).startswith(f"pid {child.pid} ")
        with pytest.raises(CellBusy, match=f"pid {child.pid}"):
            with cell_lock(folder):
                pass
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert lock_holder(folder) is None
    with cell_lock(folder):
        pass
