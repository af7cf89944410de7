"""The `--plot DIR` / `--force` pair shared by `report` and `digest-report` (and `--force`'s
rule, shared with `logit-scale --plot FILE`): the options and the checks that refuse bad input
before anything is read or written."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from flashprobe.cli.path_args import folder_path
from flashprobe.errors import FlashprobeError

PlotFolder = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        parser=folder_path,
        help="Write PNG figures into this folder (<suite>_<figure>.png). Refused before any "
        "is written when a figure of the same name is already there, unless --force.",
    ),
]
ForcePlot = Annotated[
    bool,
    typer.Option("--force", help="With --plot: replace figures of the same name in the folder."),
]


def check_force(plot: Path | None, force: bool) -> None:
    """--force replaces what --plot writes, so it needs --plot."""
    if force and plot is None:
        raise FlashprobeError("--force applies to --plot only")


def check_plot_folder(plot: Path | None, force: bool) -> None:
    """Before reading anything: --force needs --plot, and the folder must be writable with
    matplotlib installed."""
    check_force(plot, force)
    if plot is not None:
        from flashprobe.reporting.atomic import check_output_folder
        from flashprobe.reporting.plots import require_matplotlib

        require_matplotlib()
        check_output_folder(plot, "--plot")


def check_new_figures(paths: Iterable[Path], force: bool) -> None:
    """Before writing anything: refuse a figure already there, unless --force; even with it,
    something that is not a file where a figure goes (a folder), which --force cannot replace."""
    if not force:
        from flashprobe.reporting.atomic import check_new_files

        check_new_files(paths, "--force replaces it")
        return
    for path in paths:
        if path.exists() and not path.is_file():
            raise FlashprobeError(f"{path} is a folder, not a file; --force replaces only files")
