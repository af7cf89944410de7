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

`--margin M` adds a post hoc column: where a looser loss rule, the logged loss above its running
minimum + M on 3 logged records in a row (25 steps at log_every 10) from step 500 on, would have
fired on the logged curve (flashprobe.train.divergence's rule, applied to the records the digest
kept, not to every step), and a count of which classes it fires on. Exploration: a rule chosen
from these runs must then hold on runs it did not see.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashprobe.errors import OneLineParser
from flashprobe.reporting.digest.outcomes import (
    DIVERGED,
    NOT_DIVERGED,
    seed_outcome,
)
from flashprobe.reporting.digest.report import trained_cells
from flashprobe.reporting.digest.schema import DigestCell
from flashprobe.train.config import DivergenceConfig
from flashprobe.train.divergence import DivergenceMonitor

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


#: The looser rule's patience in logged records and its first step, as quick.yaml's loss rule
#: (25 steps from step 500) reads at log_every 10.
RECORDS_IN_A_ROW, MIN_STEP = 3, 500


def margin_step(cell: DigestCell, margin: float) -> int | None:
    """The first logged step at which the loss stood above its running minimum + `margin` on
    RECORDS_IN_A_ROW records in a row (from MIN_STEP on), or None."""
    rule = DivergenceConfig(rise_margin=margin, patience=RECORDS_IN_A_ROW, min_step=MIN_STEP)
    monitor = DivergenceMonitor(rule)
    for step, loss, _grad in cell.loss:
        if loss is not None and (found := monitor.update(step, loss)) is not None:
            return found.step
    return None


def rows(paths: Sequence[str | Path], margin: float | None = None) -> list[dict[str, Any]]:
    kept = trained_cells(paths)
    table = [classify(c) for c in kept]
    if margin is not None:
        for row, cell in zip(table, kept, strict=True):
            row[f"min + {margin:g} at"] = margin_step(cell, margin)
    return table


def margin_counts(table: Sequence[dict[str, Any]], margin: float) -> str:
    """Per class, on how many runs the looser rule fired."""
    column = f"min + {margin:g} at"
    parts = []
    for kind in (SMOOTH, CUT_SMOOTH, RULE, RUNAWAY):
        runs = [r for r in table if r["class"] == kind]
        parts.append(f"{kind} {sum(r[column] is not None for r in runs)} of {len(runs)}")
    return (
        f"loss above its running min + {margin:g} ({RECORDS_IN_A_ROW} logged records in a "
        f"row, from step {MIN_STEP}; post hoc) fired on: " + ", ".join(parts)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.split("\n")[0])
    parser.add_argument("digests", nargs="+", help="digest files (flashprobe digest)")
    parser.add_argument(
        "--margin", type=float, help="also where a loss rule of running min + MARGIN would fire"
    )
    args = parser.parse_args(argv)
    if args.margin is not None and not args.margin > 0:
        parser.error(f"--margin must be positive, got {args.margin}")
    try:
        table = rows(args.digests, args.margin)
    except ValueError as exc:  # FlashprobeError too: a missing or malformed digest
        parser.error(str(exc))  # one line, exit 2
    table.sort(key=lambda r: (r["class"], r["variant"], r["seed"]))
    print(tabulate(table, headers="keys", tablefmt="github", missingval="-"))
    counts = Counter(r["class"] for r in table)
    first = sum(r["runaway first by"] is not None for r in table)
    print(f"\n{len(table)} runs: " + ", ".join(f"{k} {counts[k]}" for k in
          (SMOOTH, CUT_SMOOTH, RULE, RUNAWAY)) + f"; the flag before the rule in {first} of "
          f"{counts[RULE]} stopped by it")  # fmt: skip
    if args.margin is not None:
        print(margin_counts(table, args.margin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
