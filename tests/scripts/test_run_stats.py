"""scripts/run_stats.py: the per-run numbers the findings quote, read from the digests."""

from __future__ import annotations

import subprocess
import sys

import pytest
from script_helpers import ROOT, load_script, one_line

run_stats = load_script("run_stats")

ATTRIBUTION = ROOT / "docs" / "results" / "loss-explosion-adamw-attribution.json"


def _one(name: str) -> dict:
    (cell,) = run_stats.runs([ATTRIBUTION], [name])
    return run_stats.stats(cell)


def test_an_exploded_run_reads_as_the_findings_quote_it() -> None:
    """docs/findings.md, `acc-fp32` seed 2: exploded at 2,373, gradient norm ≥ 10 from 1,929,
    up to 1.5e3, logits ≥ 1e4 from 1,899, no row-sum bias (+6.4e-7)."""
    row = _one("acc-fp32:2")
    assert (row["diverged at"], row["runaway at"]) == (2373, 2169)
    assert (row["grad ≥ 1 from"], row["grad ≥ 10 from"]) == (1769, 1929)
    assert row["max grad"] == pytest.approx(1480, rel=0.01)
    assert row["logit ≥ 1e4 from"] == 1899 and row["peak logit"] == pytest.approx(2.73e4, rel=0.01)
    assert row["ΣP − 1"] == pytest.approx(6.4e-7, rel=0.01)


def test_a_smooth_run_has_no_divergence_and_its_last_100_steps() -> None:
    row = _one("fa2:2")
    assert row["diverged at"] is None and row["runaway at"] is None
    assert row["grad ≥ 1 from"] is None and row["max grad"] < 1
    assert row["min loss"] == pytest.approx(0.612, abs=1e-3)
    assert row["last 100"] == pytest.approx(0.694, abs=1e-3)
    assert row["reached"] == 3400 and row["tok/s"] == 464055


def test_the_branch_sources_are_not_runs() -> None:
    variants = {c.variant for c in run_stats.runs([ATTRIBUTION])}
    assert "paper-code" not in variants and {"fa2", "untiled"} <= variants


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_stats.py"), str(ATTRIBUTION), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_command_prints_the_chosen_runs() -> None:
    result = _cli("--cell", "untiled:2", "--cell", "fa2-acc-bf16:2")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "| adamw-attribution" in line]
    assert len(lines) == 2 and "untiled" in lines[1] and "1468" in lines[1]


def test_an_unknown_run_is_one_line_and_exit_2() -> None:
    result = _cli("--cell", "nope:3")
    assert result.returncode == 2
    assert "no run with logged curves for nope:3" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("cell", ["fa2", "fa2:", "fa2:x"])
def test_a_cell_without_a_seed_is_one_line_and_exit_2(cell: str) -> None:
    result = _cli("--cell", cell)
    assert result.returncode == 2
    assert f"--cell {cell!r}: expected VARIANT:SEED" in result.stderr
    assert "Traceback" not in result.stderr


EMPTY = '{"format": "flashprobe-digest", "version": 3, "cells": []}'


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    return one_line(result.stderr, result.returncode, "run_stats.py")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "-1"], "--from must be a step >= 0, got -1"),
        (["--from", "x"], "argument --from: invalid int value: 'x'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    assert message in _one_line(_cli(*args))


def test_no_digest_is_one_line() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_stats.py")],
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert "the following arguments are required: digests" in _one_line(result)


def test_a_digest_without_cells_is_one_line_not_an_empty_table(tmp_path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(EMPTY)
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_stats.py"), str(empty)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert _one_line(result).endswith(f"{empty} holds no cells") and result.stdout == ""
