"""The device_queue fixture: a queue state folder under tmp_path whose python3 is this
interpreter (the one that has flashprobe installed)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from queue_harness import DeviceQueue, make_queue, shim


@pytest.fixture
def device_queue(tmp_path: Path) -> Iterator[DeviceQueue]:
    """A queue whose python3 is this interpreter (the venv that has flashprobe)."""
    bin_dir = tmp_path / "bin"
    shim(bin_dir, "python3", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    queue = make_queue(tmp_path, bin_dir)
    yield queue
    queue.stop()
