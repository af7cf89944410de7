"""A compact JSON digest of a result store: per cell, the summary and a thinned loss curve.

    python scripts/store_digest.py STORE OUT.json [--every 25]

For bringing results back from a device machine, where a whole store (deep folders, many
files) cannot travel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--every", type=int, default=25)
    args = parser.parse_args()

    from flashprobe.experiments.store import RUN_DIR, ResultStore

    cells = []
    for record in ResultStore(args.store).records():
        metrics = record.path / RUN_DIR / "metrics.jsonl"
        curve, evals, attention, spectral, qk, counts = [], [], [], [], [], []
        if metrics.is_file():
            for line in metrics.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line of an interrupted run
                step = row.get("step", 0)
                if "loss" in row and (step % args.every == 0 or (step + 1) % args.every == 0):
                    curve.append([step, row["loss"], row.get("grad_norm")])
                if "val_loss" in row:
                    evals.append([step, row["val_loss"]])
                if "attention" in row:  # per layer: max logit per head (None: not finite)
                    per_layer = {
                        layer: max((x for x in stats["max_logit"] if x is not None), default=None)
                        for layer, stats in row["attention"].items()
                    }
                    ties = {  # tie events (None for sdpa/math layers, which do not count them)
                        layer: sum(x for x in stats["tie_events"] if x is not None)
                        if stats.get("tie_events") is not None
                        else None
                        for layer, stats in row["attention"].items()
                    }
                    leaks = {  # largest key-shift leak over heads (absent before this metric)
                        layer: max((x for x in stats.get("key_shift_leak") or [] if x is not None),
                                   default=None)
                        for layer, stats in row["attention"].items()
                    }  # fmt: skip
                    sums = {  # mean ΣP − 1 over heads (absent before this metric)
                        layer: statistics.fmean(values)
                        if (values := [x for x in stats.get("softmax_sum_bias") or []
                                       if x is not None])
                        else None
                        for layer, stats in row["attention"].items()
                    }  # fmt: skip
                    lows = {  # smallest row max over heads (absent before this metric)
                        layer: min((x for x in stats.get("min_row_max") or [] if x is not None),
                                   default=None)
                        for layer, stats in row["attention"].items()
                    }  # fmt: skip
                    attention.append([step, per_layer, ties, leaks, sums, lows])
                if "spectral" in row:  # per layer: largest W_Q spectral norm over heads
                    spec = row["spectral"]
                    spectral.append([step, [max(h) for h in spec["wq_heads"]]])
                    # per layer: whole W_Q and W_K norms, and the largest W_K head
                    qk.append([step, spec["wq"], spec["wk"], [max(h) for h in spec["wk_heads"]]])
                if "attention" in row:  # per layer, summed over heads: ties and P̄ = 1 entries
                    counts.append([step, {
                        layer: [_total(stats.get("tie_events")), _total(stats.get("p_bar_ones"))]
                        for layer, stats in row["attention"].items()
                    }])  # fmt: skip
        cells.append(
            {
                "meta": record.meta,
                "summary": record.summary,
                "loss": curve,
                "val_loss": evals,
                "max_logit": attention,
                "wq_spectral": spectral,
                "qk_spectral": qk,
                "tie_counts": counts,
            }
        )
    args.out.write_text(json.dumps(cells))
    print(f"{len(cells)} cells → {args.out}")


def _total(values: list | None) -> float | None:
    """Sum over heads (None: the attention does not count it)."""
    return None if values is None else sum(x for x in values if x is not None)


if __name__ == "__main__":
    main()
