"""flashprobe/cli/plot_options.py: the --plot / --force checks of report and digest-report."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashprobe.cli.plot_options import check_new_figures, check_plot_folder
from flashprobe.errors import FlashprobeError


def test_force_without_plot_is_refused() -> None:
    with pytest.raises(FlashprobeError, match="--force applies to --plot only"):
        check_plot_folder(None, force=True)
    check_plot_folder(None, force=False)  # neither: nothing to check


def test_a_plot_folder_under_a_file_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    blocker = tmp_path / "file"
    blocker.write_text("kept")
    with pytest.raises(FlashprobeError):
        check_plot_folder(blocker / "figures", force=False)
    assert blocker.read_text() == "kept"


def test_a_figure_already_there_is_refused_unless_forced(tmp_path: Path) -> None:
    there, new = tmp_path / "s_outcomes.png", tmp_path / "s_max_logit.png"
    there.write_bytes(b"png")
    with pytest.raises(FlashprobeError, match=r"s_outcomes\.png exists"):
        check_new_figures([new, there], force=False)
    check_new_figures([new, there], force=True)
    check_new_figures([new], force=False)
    assert there.read_bytes() == b"png" and not new.exists()


def test_a_folder_where_a_figure_goes_is_refused_even_when_forced(tmp_path: Path) -> None:
    """--force replaces figures; it cannot replace a folder, so the whole set is refused
    before the first figure is written (it used to fail half-way, earlier figures replaced)."""
    first, folder = tmp_path / "a_loss.png", tmp_path / "a_tie_counts.png"
    first.write_bytes(b"old")
    folder.mkdir()
    with pytest.raises(FlashprobeError, match=r"a_tie_counts\.png is a folder"):
        check_new_figures([first, folder], force=True)
    assert first.read_bytes() == b"old"
