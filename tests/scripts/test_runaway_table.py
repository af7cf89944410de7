"""scripts/runaway_table.py: runs by the loss rule and by the gradient-runaway flag."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from script_helpers import ROOT, load_script, one_line

from flashprobe.reporting.digest.schema import DigestCell

table = load_script("runaway_table")

RESULTS = ROOT / "docs" / "results"
ADAMW = [RESULTS / f"loss-explosion-adamw-{name}.json"
         for name in ("attribution", "controls", "quick-pair-unused-seeds")]  # fmt: skip


def test_the_adamw_runs_sort_as_the_findings_count_them() -> None:
    """docs/findings.md, "The gradient-runaway event, proposed before seed 7 ran": 82 runs, 43
    smooth, 3 cut smooth, 25 stopped by the loss rule (the flag first in 21), 11 run away without
    it."""
    rows = table.rows(ADAMW)
    kinds = (table.SMOOTH, table.CUT_SMOOTH, table.RULE, table.RUNAWAY)
    by_class = {kind: [r for r in rows if r["class"] == kind] for kind in kinds}
    assert {k: len(v) for k, v in by_class.items()} == {
        table.SMOOTH: 43, table.CUT_SMOOTH: 3, table.RULE: 25, table.RUNAWAY: 11,
    }  # fmt: skip
    first = [r["runaway first by"] for r in by_class[table.RULE] if r["runaway first by"]]
    assert len(first) == 21 and (min(first), max(first)) == (12, 1083)
    smooth = {r["variant"] for r in by_class[table.SMOOTH]}
    assert "paper-code" not in smooth and {"fa2", "fp32", "score-fp32"} <= smooth
    ran = {(r["variant"], r["seed"]) for r in by_class[table.RUNAWAY]}
    assert {("paper-code", 5), ("paper-code", 6), ("paper-code", 7), ("paper-sfa", 0)} <= ran


def test_the_command_prints_the_table_and_the_counts() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "runaway_table.py"), *map(str, ADAMW)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith(
        "82 runs: smooth 43, cut, smooth 3, loss rule 25, runaway, no rule 11; the flag before "
        "the rule in 21 of 25 stopped by it"
    )


def _curve(losses: list[float], start: int = 490) -> Any:
    cell = DigestCell(Path("d.json"), 0, 0, 3, {"variant": "v", "seed": 0}, None)
    records = tuple((start + 10 * i, loss, 0.1) for i, loss in enumerate(losses))
    return dataclasses.replace(cell, loss=records)


def test_the_looser_rule_needs_three_records_above_the_running_min_plus_margin() -> None:
    flat = [1.0, 0.9, 0.8]
    assert table.margin_step(_curve([*flat, 1.11, 1.12, 0.9, 1.2]), 0.3) is None  # 2 in a row
    assert table.margin_step(_curve([*flat, 1.11, 1.12, 1.15, 1.2]), 0.3) == 540  # the third
    assert table.margin_step(_curve([*flat, 1.11, 1.12, 1.15]), 0.4) is None  # not above + 0.4
    # records before step 500 do not count: 480 and 490 are above, 500-520 fire it
    assert table.margin_step(_curve([2.0, 0.5, 0.9, 0.9, 0.9, 0.9, 0.9], start=460), 0.3) == 520


def test_a_loss_rule_of_min_plus_0_3_sorts_the_adamw_runs_as_the_findings_say() -> None:
    """docs/findings.md, the runaway paragraph: post hoc, min + 0.3 fires on every run the rule
    stopped and on 10 of the 11 runaways (not `paper-sfa` 0), on none of the 46 smooth runs."""
    rows = table.rows(ADAMW, margin=0.3)
    assert table.margin_counts(rows, 0.3).endswith(
        "fired on: smooth 0 of 43, cut, smooth 0 of 3, loss rule 25 of 25, "
        "runaway, no rule 10 of 11"
    )
    missed = [(r["variant"], r["seed"]) for r in rows
              if r["class"] == table.RUNAWAY and r["min + 0.3 at"] is None]  # fmt: skip
    assert missed == [("paper-sfa", 0)]
    judged = {r["seed"]: r["min + 0.3 at"] for r in rows
              if r["variant"] == "paper-code" and r["seed"] in (5, 6, 7)}  # fmt: skip
    assert judged == {5: 2599, 6: 3069, 7: 3319}


@pytest.mark.parametrize("content", [None, "", "{}", "not json", b"\x89PNG\x00"])
def test_a_missing_or_malformed_digest_is_one_line_and_exit_2(tmp_path, content) -> None:
    path = tmp_path / "d.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "runaway_table.py"), str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("runaway_table.py: error: ") and "d.json" in last


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "runaway_table.py"), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    return one_line(result.stderr, result.returncode, "runaway_table.py")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: digests"),
        ((str(ADAMW[0]), "--bogus"), "unrecognized arguments: --bogus"),
        ((str(ADAMW[0]), "--margin", "0"), "--margin must be positive, got 0.0"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    assert message in _one_line(_run(*args))


def test_digests_without_cells_are_one_line_not_an_empty_table(tmp_path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"format": "flashprobe-digest", "version": 3, "cells": []}')
    result = _run(str(empty))
    assert _one_line(result).endswith(f"{empty} holds no cells") and result.stdout == ""
    both = _one_line(_run(str(empty), str(empty)))
    assert both.endswith(f"the digests {empty}, {empty} hold no cells")
