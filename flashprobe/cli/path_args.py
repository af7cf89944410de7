"""Parsers for the command line's path arguments (typer's `parser=`).

A path reaches the commands as pathlib.Path, which reads an empty string as `.` and drops a
trailing slash. So `--store ''` (an unset shell variable) would train into the current folder
and `digest-merge newdir/ a.json b.json` would write a file named `newdir`. These parsers see
the text as typed and refuse both before anything is read or written.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer


def _given(value: str | Path, what: str) -> Path:
    text = os.fspath(value)
    if not text.strip():
        raise typer.BadParameter(f"empty {what}")
    return Path(text)


def folder_path(value: str | Path) -> Path:
    """A folder to read or write: any non-empty path."""
    return _given(value, "folder path")


def file_path(value: str | Path) -> Path:
    """A file to read or write: non-empty, and not written as a folder (`name/`)."""
    path = _given(value, "file name")
    text = os.fspath(value)
    if text.endswith(("/", os.sep)) or Path(text).name in ("", ".", ".."):
        raise typer.BadParameter(f"{text} names a folder; give a file name")
    return path
