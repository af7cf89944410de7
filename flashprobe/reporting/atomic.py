"""Writes that never leave a half-written file and never overwrite earlier results."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from flashprobe.errors import FlashprobeError


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename it into place."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, blob: bytes) -> None:
    """Write via a temporary file in the same folder, fsync it, and rename it into place.

    The file gets the mode a plain open() would give it (0o666 less the umask), not mkstemp's
    0o600: a store shared by a team stays readable to it.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        # a path the user gave that cannot hold a file: name it, not the temporary file
        raise FlashprobeError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_mode(folder: bool = False) -> int:
    """The mode open() (0o666) or mkdir() (0o777) gives a new file or folder under the umask."""
    return (0o777 if folder else 0o666) & ~_umask()


def _umask() -> int:
    try:  # Linux >= 4.7 shows it without changing it (os.umask would, for every thread)
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_new(path: Path, text: str) -> None:
    """Like write_text_atomic, but refuse to replace a file that already exists."""
    if path.exists():
        raise FlashprobeError(f"{path} exists; refusing to overwrite it")
    write_text_atomic(path, text)


def check_new_files(paths: Iterable[Path], replace: str) -> None:
    """Refuse, before writing any of them, files of which one is there already (a file, a
    folder or a link): one line naming the first, saying how to `replace` them."""
    for path in paths:
        if os.path.lexists(path):
            raise FlashprobeError(f"{path} exists; refusing to overwrite it ({replace})")


def check_output_folder(path: Path, what: str) -> None:
    """Refuse, before any work, an output folder that cannot be created or written: a file, a
    folder under a file, a read-only file system. Creates nothing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FlashprobeError(f"{what} {path} is not a folder")
    existing = path
    while not existing.exists():  # the nearest folder that exists: where mkdir would start
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise FlashprobeError(f"{what} {path}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK) or not _can_create_in(existing):
        raise FlashprobeError(f"{what} {path}: {existing} is not writable")


def _can_create_in(folder: Path) -> bool:
    """Try it: os.access says yes to root everywhere, also in /proc, where nothing is created."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".flashprobe-write-check.")
    except OSError:
        return False
    os.close(fd)
    Path(probe).unlink(missing_ok=True)
    return True
