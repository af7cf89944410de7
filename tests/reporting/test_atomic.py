from __future__ import annotations

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.atomic import write_text_atomic, write_text_new


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
