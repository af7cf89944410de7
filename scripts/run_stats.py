"""Per run of some digests, the numbers the findings quote: outcome, loss, gradient norm,
largest logit, softmax-sum bias and speed, read from the digests the same way the report does.

After merging a device session's digest, this prints what the closing note and the findings'
tables need for the new cells, instead of computing them by hand:

    python scripts/run_stats.py docs/results/loss-explosion-adamw-attribution.json \
        --cell acc-fp32:2 --cell untiled:2

Columns (logged steps are every 10th; "after" counts from --from, default 500, the branch step):
min loss and the mean of the last 10 logged losses (the last 100 steps); the first logged step
whose gradient norm reaches 1 and 10, and the largest after --from; the report's gradient-runaway
flag (attribution.runaway); the largest max logit before the divergence, the first step past
1e4, and the median ΣP − 1 over those records (attention.summarise, as the report's table);
tokens/s from the run's summary. Each variant, grid point and seed counts once, as
digest-report counts it; branch sources trained only to the branch step are left out.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashprobe.errors import OneLineParser
from flashprobe.reporting.digest import attention
from flashprobe.reporting.digest.outcomes import (
    DIVERGED,
    seed_outcome,
)
from flashprobe.reporting.digest.report import trained_cells
from flashprobe.reporting.digest.schema import DigestCell

LAST_ROWS = 10  # logged every 10 steps: the last 100 steps


def stats(cell: DigestCell, after: int = 500) -> dict[str, Any]:
    """One run's numbers (None where the run did not record them)."""
    outcome = seed_outcome(cell)
    logged = [(s, loss, g) for s, loss, g in cell.loss if s >= after]
    losses = [loss for _, loss, _ in logged if loss is not None]
    grads = [(s, g) for s, _, g in logged if g is not None]
    summary = attention.summarise(cell)
    crossings = dict(summary.crossings) if summary else {}
    speed = (cell.summary or {}).get("tokens_per_s")
    return {
        "suite": cell.suite,
        "variant": cell.variant,
        "seed": cell.seed,
        "reached": cell.steps_reached,
        "diverged at": outcome.step if outcome.status == DIVERGED else None,
        "runaway at": None if outcome.runaway is None else outcome.runaway.step,
        "min loss": min(losses) if losses else None,
        "last 100": statistics.fmean(losses[-LAST_ROWS:]) if losses else None,
        "grad ≥ 1 from": next((s for s, g in grads if g >= 1), None),
        "grad ≥ 10 from": next((s for s, g in grads if g >= 10), None),
        "max grad": max((g for _, g in grads), default=None),
        "peak logit": summary.peak_logit[0] if summary and summary.peak_logit else None,
        "logit ≥ 1e4 from": crossings.get(1e4),
        "ΣP − 1": summary.sum_bias if summary else None,
        "tok/s": None if speed is None else round(speed),
    }


def runs(paths: Sequence[str | Path], chosen: Sequence[str] = ()) -> list[DigestCell]:
    """The counted runs with logged curves, or only those named VARIANT:SEED."""
    kept = trained_cells(paths)
    if not chosen:
        return kept
    malformed = [name for name in chosen if not name.rpartition(":")[2].isdigit()]
    if malformed:
        raise ValueError(f"--cell {malformed[0]!r}: expected VARIANT:SEED, e.g. fa2:0")
    wanted = {tuple(name.rsplit(":", 1)) for name in chosen}
    picked = [c for c in kept if (c.variant, str(c.seed)) in wanted]
    missing = wanted - {(c.variant, str(c.seed)) for c in picked}
    if missing:
        names = ", ".join(f"{v}:{s}" for v, s in sorted(missing))
        raise ValueError(f"no run with logged curves for {names}")
    return picked


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.split("\n")[0])
    parser.add_argument("digests", nargs="+", help="digest files (flashprobe digest)")
    parser.add_argument("--cell", action="append", default=[], help="VARIANT:SEED (repeatable)")
    parser.add_argument("--from", dest="after", type=int, default=500,
                        help="first step counted for the loss and gradient columns")  # fmt: skip
    args = parser.parse_args(argv)
    if args.after < 0:
        parser.error(f"--from must be a step >= 0, got {args.after}")
    try:
        chosen = runs(args.digests, args.cell)
    except ValueError as exc:
        parser.error(str(exc))  # one line, exit 2
    table = [stats(c, args.after) for c in chosen]
    table.sort(key=lambda r: (r["variant"], r["seed"], r["suite"]))
    print(tabulate(table, headers="keys", tablefmt="github", missingval="-", floatfmt=".3g"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
