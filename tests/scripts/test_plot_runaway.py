"""scripts/plot_runaway.py: bad input is one line and exit 2, an existing figure is kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_helpers import ROOT, load_script, refused

SCRIPT = ROOT / "scripts" / "plot_runaway.py"
plot = load_script("plot_runaway")

RUN = ROOT / "docs" / "results" / "runaway-2500-steps.json"
CURRENT = '{"format": "flashprobe-digest", "version": 3, "cells": []}'


def _refused(capsys, *argv: str) -> str:
    return refused(plot.main, capsys, argv, "plot_runaway.py")


def test_an_existing_figure_is_kept_without_force(tmp_path, capsys) -> None:
    out = tmp_path / "k.png"
    out.write_text("keep")
    assert "k.png exists; refusing to overwrite it (--force replaces it)" in _refused(
        capsys, str(RUN), str(out)
    )
    assert out.read_text() == "keep"


def test_the_figure_and_table_and_force_replaces(tmp_path) -> None:
    """The normal run (a subprocess, as the docs run it), then --force over its figure."""
    out = tmp_path / "new" / "runaway.png"  # a missing folder is made
    command = [sys.executable, str(SCRIPT), str(RUN), str(out), "--horizon", "2500"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert first.returncode == 0, first.stderr
    assert "| fa2 | none / none / none (0 of 3) |" in first.stdout
    assert out.read_bytes().startswith(b"\x89PNG")
    out.write_text("old")
    again = subprocess.run([*command, "--force"], capture_output=True, text=True, timeout=300,
                           check=False)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("{tmp}", "is a folder"),
        ("", "OUT is empty"),
        ("{tmp}/figure.txt", "extension .txt is not an image format"),
        ("{tmp}/figure", "has no extension"),
        ("{tmp}/file/figure.png", "file is not a folder"),
    ],
)
def test_an_output_that_cannot_be_a_figure_is_refused(tmp_path, capsys, out, message) -> None:
    (tmp_path / "file").write_text("x")
    before = sorted(tmp_path.rglob("*"))
    assert message in _refused(capsys, str(RUN), out.format(tmp=tmp_path))
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, nothing like /tmp.png


def _without_max_logit(path: Path) -> None:
    cells = json.loads(RUN.read_text())
    del cells[3]["max_logit"]
    path.write_text(json.dumps(cells))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "digest not found: "),
        (CURRENT, "is a format-3 digest, which this script cannot plot; it expects the format-1"),
        (_without_max_logit, ": cell 3 has no max_logit"),
        (RUN.read_text()[:1000], "digest is not JSON: "),
        ("[]", "holds no cells"),
        ("{}", "not a digest this script can plot: "),
        ('[{"meta": 1, "summary": null, "loss": [], "max_logit": []}]', "cell 0 has no meta"),
        (b"\x89PNG\x00", "is not text"),
    ],
)
def test_a_digest_it_cannot_plot_is_one_line_naming_it(tmp_path, capsys, content, message):
    digest = tmp_path / "d.json"
    if callable(content):
        content(digest)
    elif isinstance(content, bytes):
        digest.write_bytes(content)
    elif content is not None:
        digest.write_text(content)
    err = _refused(capsys, str(digest), str(tmp_path / "out.png"))
    assert message in err and "d.json" in err
    assert not (tmp_path / "out.png").exists()


def test_a_folder_as_the_digest_and_bad_numbers(tmp_path, capsys) -> None:
    out = str(tmp_path / "out.png")
    assert "is a folder, not a digest" in _refused(capsys, str(tmp_path), out)
    assert "--limit must be a positive number" in _refused(capsys, str(RUN), out, "--limit", "0")
    assert "--horizon must be a step count" in _refused(capsys, str(RUN), out, "--horizon", "0")
    assert "unrecognized arguments: --bogus" in _refused(capsys, str(RUN), out, "--bogus")
