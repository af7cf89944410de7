"""One writer per cell: an advisory lock on STORE/<suite>/<cell>/.lock.

Two `flashprobe ablate` processes on one store (the same command in two terminals, a scheduler
retrying a job, a `--resume` or `--restart` while the first still trains) would both train a
cell, or one would delete the other's live output. The runner holds the cell's lock while it
writes the cell; a second process finds it held and leaves the cell alone, naming the holder.
The kernel drops the lock when its process ends, however it ends (kill -9 included), so a
stale lock never blocks a resume. fcntl.flock: Linux and macOS, local and NFS file systems.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from flashprobe.errors import FlashprobeError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock (one process per store there)
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".lock"


class CellBusy(FlashprobeError):
    """Another process holds the cell's lock (the message names it)."""


@contextlib.contextmanager
def cell_lock(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock for the block (the folder is created); CellBusy at once if another
    process holds it. The lock file records the holder: pid, host and since when."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = _open(folder / LOCK_FILE)
    try:
        if fcntl is not None and not _try_lock(fd):
            raise CellBusy(f"another process is writing it ({_holder(fd)})")
        with contextlib.suppress(OSError):  # a lock file of another user: readable only
            since = dt.datetime.now().astimezone().isoformat(timespec="seconds")
            holder = f"pid {os.getpid()} on {socket.gethostname()} since {since}\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def lock_holder(folder: Path) -> str | None:
    """Who holds `folder`'s lock now (None: nobody, or no lock file)."""
    if fcntl is None or not (folder / LOCK_FILE).is_file():
        return None
    fd = _open(folder / LOCK_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)
    return None


def _try_lock(fd: int, attempts: int = 5, pause_s: float = 0.05) -> bool:
    """Take the lock; a few tries, as `lock_holder` in another process holds it for an instant."""
    for attempt in range(attempts):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < attempts:
                time.sleep(pause_s)
    return False


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text or "pid unknown"
