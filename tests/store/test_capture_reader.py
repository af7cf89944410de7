"""Capture files read back: a file the manifest lists but that is gone, and their sha256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_capture import tensors, writer

from flashprobe.errors import FlashprobeError
from flashprobe.store.capture_reader import capture_files, capture_sha256


def _cell(tmp_path: Path) -> SimpleNamespace:
    """A cell whose run/captures hold steps 2 and 5 (written by the capture writer)."""
    write = writer(tmp_path / "run", 2**20)
    write(2, tensors())
    write(5, tensors())
    return SimpleNamespace(run_dir=tmp_path / "run")


def test_a_listed_capture_that_is_gone_is_one_line(tmp_path) -> None:
    cell = _cell(tmp_path)
    assert [step for step, _ in capture_files(cell)] == [2, 5]
    gone = tmp_path / "run" / "captures" / "step_0000005.safetensors"
    gone.unlink()
    with pytest.raises(FlashprobeError, match=r"missing capture file .*step_0000005") as error:
        capture_files(cell)
    assert "manifest.json lists it" in str(error.value) and "\n" not in str(error.value)
    (tmp_path / "run" / "captures" / "manifest.json").write_text("{torn")
    with pytest.raises(FlashprobeError, match="corrupt JSON"):
        capture_files(cell)


def test_a_captures_folder_removed_whole_holds_none(tmp_path) -> None:
    cell = _cell(tmp_path)
    for path in (tmp_path / "run" / "captures").iterdir():
        path.unlink()
    (tmp_path / "run" / "captures").rmdir()
    assert capture_files(cell) == []


def test_sha256_comes_from_the_manifest_else_from_the_file(tmp_path) -> None:
    cell = _cell(tmp_path)
    steps = capture_files(cell)
    real = [hashlib.sha256(path.read_bytes()).hexdigest() for _, path in steps]
    assert capture_sha256(steps) == real
    manifest_path = tmp_path / "run" / "captures" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["steps"]["2"]["sha256"] = "0" * 64  # the manifest's word is taken (not re-read)
    del manifest["steps"]["5"]["sha256"]  # an older store's manifest: read off the file
    manifest_path.write_text(json.dumps(manifest))
    assert capture_sha256(steps) == ["0" * 64, real[1]]
    manifest["steps"]["2"]["bytes"] += 1  # not the file it was recorded for: read off the file
    manifest_path.write_text(json.dumps(manifest))
    assert capture_sha256(steps) == real


def test_a_garbage_capture_file_names_safetensors_reason(tmp_path) -> None:
    from flashprobe.store.capture_reader import load_capture, read_capture_header

    path = tmp_path / "step_0000001.safetensors"
    path.write_bytes(b"garbage-bytes-here")
    for read in (load_capture, read_capture_header):
        with pytest.raises(FlashprobeError) as error:
            read(1, path)
        message = str(error.value)
        assert message.startswith(f"corrupt capture file {path}: SafetensorError: ")
        assert "header" in message and "\n" not in message
