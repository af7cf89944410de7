from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.atomic import (
    check_new_files,
    check_output_folder,
    write_text_atomic,
    write_text_new,
)


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path) -> None:
    path = tmp_path / "sub" / "out.json"
    write_text_atomic(path, "one")
    write_text_atomic(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["out.json"]


def test_write_new_refuses_to_overwrite(tmp_path) -> None:
    path = tmp_path / "out.json"
    write_text_new(path, "first")
    with pytest.raises(FlashprobeError, match="exists"):
        write_text_new(path, "second")
    assert path.read_text() == "first"


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_atomic_files_get_the_umask_mode_not_0600(tmp_path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        path = tmp_path / "out.json"
        write_text_atomic(path, "x")
        plain = tmp_path / "plain.json"
        plain.write_text("x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


def test_check_output_folder_creates_nothing(tmp_path) -> None:
    check_output_folder(tmp_path / "a" / "b", "--plot")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "file" / "sub"):
        with pytest.raises(FlashprobeError, match="is not a folder"):
            check_output_folder(bad, "--plot")


def test_check_new_files_names_the_first_that_is_there(tmp_path) -> None:
    paths = [tmp_path / name for name in ("a.png", "b.png", "c.png", "d.png")]
    check_new_files(paths, "--force replaces it")
    paths[1].mkdir()  # a folder, or a link to nothing, is there too
    paths[2].symlink_to(tmp_path / "nowhere")
    paths[3].write_bytes(b"x")
    message = f"{paths[1]} exists; refusing to overwrite it (--force replaces it)"
    with pytest.raises(FlashprobeError) as refused:
        check_new_files(paths, "--force replaces it")
    assert str(refused.value) == message
    paths[1].rmdir()
    with pytest.raises(FlashprobeError, match=r"c\.png exists"):
        check_new_files(paths, "--force replaces it")


PROC = Path("/proc")


@pytest.mark.skipif(not (PROC / "self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_where_nothing_can_be_created_is_refused_before_any_work() -> None:
    """/proc passes os.access for root, yet no file can be created in it: the check tries."""
    with pytest.raises(FlashprobeError, match="/proc is not writable"):
        check_output_folder(PROC / "figures", "--plot")


@pytest.mark.skipif(not (PROC / "self").is_dir(), reason="needs Linux's /proc")
def test_an_atomic_write_that_cannot_start_names_the_file_not_its_temporary() -> None:
    with pytest.raises(FlashprobeError, match=r"^cannot write /proc/x\.json: ") as raised:
        write_text_atomic(PROC / "x.json", "{}")
    assert ".tmp" not in str(raised.value)
