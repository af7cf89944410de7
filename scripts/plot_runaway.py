"""The logit-runaway tables and figures of docs/findings.md, from a store digest.

    python scripts/plot_runaway.py docs/results/runaway-2500-steps.json OUT.png \
        [--limit 1000] [--horizon 3000]

Prints, per variant and seed, the first sampled step at which the layer-1 max attention logit
exceeds the limit (the runaway), how many seeds failed within the horizon's steps (0-based
steps below it, as `flashprobe report --horizon`) as ablations/quick.yaml's rule counts it (a
runaway, or a divergence first; 3000 steps; a seed that stopped earlier without failing has no
outcome), where the
loss rule tripped, the last step recorded and the median layer-1 key-shift leak over steps
≤ 1000 (before any runaway). The figure has one panel
per variant: the layer-1 max logit of each seed against the step, log scale; and one of the
training loss (mean of the seeds) of every variant.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ORDER = (
    "paper-code", "delta-o-fp32", "untiled", "l-fp32", "acc-fp32", "fa2", "fa2-l-bf16", "fp32",
    "paper-sfa", "paper-sfa-beta-1.125",
)  # fmt: skip
STYLES = {0: "-", 1: "--", 2: ":"}


def layer_series(cell: dict, index: int, layer: str = "1") -> list[tuple[int, float]]:
    """(step, value) of one per-layer attention column (1: max logit, 3: key-shift leak)."""
    out = []
    for row in cell["max_logit"]:
        value = (row[index] or {}).get(layer) if len(row) > index else None
        if value is not None:
            out.append((row[0], value))
    return out


def runaway_step(cell: dict, limit: float) -> int | None:
    return next((s for s, x in layer_series(cell, 1) if x > limit), None)


def _steps_done(cell: dict) -> int:
    """Steps the run trained: its summary's count, else the last logged loss step + 1."""
    summary = cell["summary"] or {}
    if "steps_done" in summary:
        return int(summary["steps_done"])
    return cell["loss"][-1][0] + 1 if cell["loss"] else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("digest", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit", type=float, default=1000.0)
    parser.add_argument("--horizon", type=int, default=3000)
    args = parser.parse_args()
    cells = json.loads(args.digest.read_text())
    by_variant: dict[str, list[dict]] = {}
    for cell in cells:
        by_variant.setdefault(cell["meta"]["variant"], []).append(cell)
    variants = [v for v in ORDER if v in by_variant] + sorted(set(by_variant) - set(ORDER))

    print(
        f"| variant | runaway step (s0 / s1 / s2) | by step {args.horizon} | loss rule tripped "
        "| last step | leak ≤ 1000 |"
    )
    print("|---|---|---|---|---|---|")
    for variant in variants:
        mine = sorted(by_variant[variant], key=lambda c: c["meta"]["seed"])
        runaway = [runaway_step(c, args.limit) for c in mine]
        done = [(c["meta"]["seed"], c["summary"]) for c in mine if c["summary"]]
        tripped = [
            f"s{seed} {summary['diverged_step']} ({summary['divergence_rule']})"
            for seed, summary in done
            if summary.get("diverged")
        ]
        last = [c["loss"][-1][0] if c["loss"] else 0 for c in mine]
        # as the suite's failure rule counts it: a runaway, or a divergence before one
        ends = [(c["summary"] or {}).get("diverged_step") for c in mine]
        fails = [min((x for x in (s, e) if x is not None), default=None)
                 for s, e in zip(runaway, ends, strict=True)]  # fmt: skip
        early = [s is not None and s < args.horizon for s in fails]  # 0-based: steps < N
        known = [e or _steps_done(c) >= args.horizon for e, c in zip(early, mine, strict=True)]
        leaks = [x for c in mine for s, x in layer_series(c, 3) if s <= 1000]
        leak = f"{statistics.median(leaks):.4f}" if leaks else "—"
        print(
            f"| {variant} | {' / '.join(str(s) if s else 'none' for s in runaway)} "
            f"({sum(s is not None for s in runaway)} of {len(mine)}) | "
            f"{sum(early)} of {sum(bool(k) for k in known)} | "
            f"{', '.join(tripped) or 'none'} | {' / '.join(map(str, last))} | {leak} |"
        )

    cols = 4
    rows = -(-(len(variants) + 1) // cols)  # + a loss panel
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), sharex=True)
    flat = list(axes.flat)
    for ax, variant in zip(flat, variants, strict=False):
        for cell in sorted(by_variant[variant], key=lambda c: c["meta"]["seed"]):
            seed = cell["meta"]["seed"]
            points = layer_series(cell, 1)
            ax.plot(*zip(*points, strict=True), STYLES.get(seed, "-"), lw=1.1, label=f"seed {seed}")
            summary = cell["summary"] or {}
            if summary.get("diverged"):
                ax.plot(points[-1][0], points[-1][1], "x", color="black", ms=7)
        ax.axhline(args.limit, color="grey", lw=0.6, ls="-.")
        ax.set_yscale("log")
        ax.set_ylim(5, 3e4)
        ax.set_title(f"{variant}: layer-1 max logit", fontsize=10)
        ax.grid(alpha=0.3)
    loss_ax = flat[len(variants)]
    for variant in variants:  # the seeds' mean of the logged training loss (every 25 steps)
        series = [dict((s, x) for s, x, *_ in c["loss"]) for c in by_variant[variant]]
        steps = sorted(set.intersection(*(set(x) for x in series)))
        mean = [statistics.fmean(x[s] for x in series) for s in steps]
        loss_ax.plot(steps, mean, lw=1.0, label=variant)
    loss_ax.set_title("training loss, mean of the seeds", fontsize=10)
    loss_ax.set_ylim(0.3, 3.0)
    loss_ax.grid(alpha=0.3)
    loss_ax.legend(fontsize=6, ncol=2)
    for ax in flat[len(variants) + 1 :]:
        ax.axis("off")
    flat[0].legend(fontsize=8)
    fig.supxlabel("step")
    fig.suptitle(
        "Muon lr 1.4e-2, 6L/384 byte GPT, one H200 (x: the run stopped, loss rule or NaN)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"figure → {args.out}")


if __name__ == "__main__":
    main()
