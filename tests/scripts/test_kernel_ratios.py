"""scripts/kernel_ratios.py: the ratio table of a bench file; bad input is one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from script_helpers import ROOT, load_script

SCRIPT = ROOT / "scripts" / "kernel_ratios.py"
ratios = load_script("kernel_ratios")

GRID = ROOT / "docs" / "results" / "kernels-h200-grid.json"
ZERO_TFLOPS = (
    '{"timings": [{"impl": "fa2", "mode": "fwd", "seq": 1024, "head_dim": 64, "causal": true, '
    '"tflops": 0}]}'
)


def test_the_table_of_the_h200_grid() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), str(GRID)], capture_output=True,
                            text=True, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "| comparison | range over the shapes | target |" in result.stdout
    assert "| `fa2` forward ÷ SDPA flash |" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "bench file not found: "),
        ('{"timings": [', "bench file is not JSON: "),
        ("{}", "has no timings list"),
        ("[]", "has no timings list"),
        ('{"format": "flashprobe-digest", "version": 3, "cells": []}', "is a flashprobe digest"),
        ('{"timings": []}', "holds no timings"),
        ('{"timings": [{"impl": "fa2", "mode": "fwd"}]}', "timings[0] has no seq"),
        (ZERO_TFLOPS, "timings[0] has tflops 0"),
        (b"\x89PNG\x00", "is not text"),
    ],
)
def test_a_file_it_cannot_read_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "bench.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exited:
        ratios.main([str(path)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("kernel_ratios.py: error: ") and message in err and "bench.json" in err


def test_a_folder_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        ratios.main([str(tmp_path)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.strip().endswith("is a folder, not a bench file")
