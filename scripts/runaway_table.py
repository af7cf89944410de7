"""Every run of some digests by the loss rule and by the gradient-runaway flag, side by side.

How the report's runaway flag (attribution.runaway: a logged gradient norm at 100× the median of
the run's earlier ones; a branched run's own steps) sorts the runs: smooth (neither fired),
stopped by the loss rule (and whether the flag fired first, by how many steps), or run away
without the rule firing. The findings' "What a gradient-runaway event would count" is this
table for the AdamW digests at quick.yaml's settings:

    python scripts/runaway_table.py docs/results/loss-explosion-adamw-attribution.json \
        docs/results/loss-explosion-adamw-controls.json \
        docs/results/loss-explosion-adamw-quick-pair-unused-seeds.json

Runs without logged curves (format v1) and branch sources trained only to the branch step are
left out; each variant, grid point and seed counts once, as digest-report counts it.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashprobe.reporting.digest.outcomes import (
    DIVERGED,
    NOT_DIVERGED,
    seed_outcome,
    trained_runs,
)
from flashprobe.reporting.digest.report import load_digests
from flashprobe.reporting.digest.schema import DigestCell

SMOOTH, CUT_SMOOTH, RULE, RUNAWAY = "smooth", "cut, smooth", "loss rule", "runaway, no rule"


def classify(cell: DigestCell) -> dict[str, Any]:
    """One run: its outcome by the loss rule and by the runaway flag (as digest-report reads
    them: outcomes.seed_outcome)."""
    outcome = seed_outcome(cell)
    runaway, diverged = outcome.runaway, outcome.status == DIVERGED
    if diverged:
        kind = RULE
    elif runaway is not None:
        kind = RUNAWAY
    else:
        kind = SMOOTH if outcome.status == NOT_DIVERGED else CUT_SMOOTH
    first = runaway is not None and diverged and runaway.step < outcome.step
    return {
        "suite": cell.suite,
        "variant": cell.variant,
        "seed": cell.seed,
        "reached": cell.steps_reached,
        "class": kind,
        "diverged at": outcome.step if diverged else None,
        "runaway at": None if runaway is None else runaway.step,
        "runaway first by": outcome.step - runaway.step if first else None,  # type: ignore[union-attr]
    }


def rows(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    cells = [cell for digest in load_digests(paths) for cell in digest.cells]
    kept = trained_runs(cells)
    return [classify(c) for c in kept]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("digests", nargs="+", help="digest files (flashprobe digest)")
    args = parser.parse_args(argv)
    table = sorted(rows(args.digests), key=lambda r: (r["class"], r["variant"], r["seed"]))
    print(tabulate(table, headers="keys", tablefmt="github", missingval="-"))
    counts = Counter(r["class"] for r in table)
    first = sum(r["runaway first by"] is not None for r in table)
    print(f"\n{len(table)} runs: " + ", ".join(f"{k} {counts[k]}" for k in
          (SMOOTH, CUT_SMOOTH, RULE, RUNAWAY)) + f"; the flag before the rule in {first} of "
          f"{counts[RULE]} stopped by it")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
