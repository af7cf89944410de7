"""Writes that never leave a half-written file and never overwrite earlier results."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from flashprobe.errors import FlashprobeError


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename it into place."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, blob: bytes) -> None:
    """Write via a temporary file in the same folder, fsync it, and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_new(path: Path, text: str) -> None:
    """Like write_text_atomic, but refuse to replace a file that already exists."""
    if path.exists():
        raise FlashprobeError(f"{path} exists; refusing to overwrite it")
    write_text_atomic(path, text)
