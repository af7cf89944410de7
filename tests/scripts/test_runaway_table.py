"""scripts/runaway_table.py: runs by the loss rule and by the gradient-runaway flag."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location(
    "runaway_table", ROOT / "scripts" / "runaway_table.py"
)
table = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(table)  # type: ignore[union-attr]

RESULTS = ROOT / "docs" / "results"
ADAMW = [RESULTS / f"loss-explosion-adamw-{name}.json"
         for name in ("attribution", "controls", "quick-pair-unused-seeds")]  # fmt: skip


def test_the_adamw_runs_sort_as_the_findings_count_them() -> None:
    """docs/findings.md, "The gradient-runaway event, proposed before seed 7 ran": 72 runs, 37
    smooth, 1 cut smooth, 23 stopped by the loss rule (the flag first in 20), 11 run away without
    it."""
    rows = table.rows(ADAMW)
    kinds = (table.SMOOTH, table.CUT_SMOOTH, table.RULE, table.RUNAWAY)
    by_class = {kind: [r for r in rows if r["class"] == kind] for kind in kinds}
    assert {k: len(v) for k, v in by_class.items()} == {
        table.SMOOTH: 37, table.CUT_SMOOTH: 1, table.RULE: 23, table.RUNAWAY: 11,
    }  # fmt: skip
    first = [r["runaway first by"] for r in by_class[table.RULE] if r["runaway first by"]]
    assert len(first) == 20 and (min(first), max(first)) == (12, 1083)
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
        "72 runs: smooth 37, cut, smooth 1, loss rule 23, runaway, no rule 11; the flag before "
        "the rule in 20 of 23 stopped by it"
    )
