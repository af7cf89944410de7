"""The figure of the research log's Muon learning-rate search, from its digest (in git history).

    python tools/plot_muon_search.py docs/results/quick-search-muon-high-lr.json OUT.png

Left: the layer-1 max logit of paper-code against fa2 at lr 1.2e-2 and 1.4e-2 (where the
numerics change when the runaway starts). Middle: the training loss of the same runs. Right:
lr 1.6e-2, every numerics variant and seed (where they all diverge within a few hundred steps of
each other).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLOURS = {
    "paper-code": "tab:red",
    "fa2": "tab:blue",
    "acc-fp32": "tab:green",
    "delta-o-fp32": "tab:orange",
    "fp32": "black",
    "untiled": "tab:purple",
}
STYLES = {0: "-", 1: "--", 2: ":"}


def layer_logit(cell: dict, layer: str = "1") -> tuple[list[int], list[float]]:
    points = [(row[0], row[1].get(layer)) for row in cell["max_logit"]]
    return [s for s, x in points if x], [x for s, x in points if x]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("digest", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    cells = json.loads(args.digest.read_text())

    fig, (ax_logit, ax_loss, ax_div) = plt.subplots(1, 3, figsize=(17, 4.8))
    for cell in cells:
        variant, seed, lr = cell["meta"]["variant"], cell["meta"]["seed"], cell["lr"]
        colour = COLOURS.get(variant, "grey")
        steps = [row[0] for row in cell["loss"]]
        losses = [row[1] for row in cell["loss"]]
        if lr in (1.2e-2, 1.4e-2) and variant in ("paper-code", "fa2"):
            label = f"{variant} lr {lr:g} s{seed}"
            style = "-." if lr == 1.2e-2 else STYLES[seed]
            ax_logit.plot(*layer_logit(cell), style, color=colour, label=label, lw=1.2)
            ax_loss.plot(steps, losses, style, color=colour, label=label, lw=0.8)
        if lr == 1.6e-2:
            label = f"{variant} s{seed}"
            ax_div.plot(steps, losses, STYLES[seed], color=colour, lw=0.9, label=label)
            if (cell["summary"] or {}).get("diverged"):
                ax_div.plot(cell["summary"]["diverged_step"], losses[-1], "x", color=colour)
    ax_logit.set(yscale="log", xlabel="step", ylabel="layer-1 max attention logit",
                 title="Muon: layer-1 logit runaway (lr 1.2e-2, 1.4e-2)")  # fmt: skip
    ax_loss.set(xlabel="step", ylabel="training loss", ylim=(0.3, 2.0),
                title="same runs: training loss")  # fmt: skip
    ax_div.set(xlabel="step", ylabel="training loss", ylim=(0.5, 3.0),
               title="Muon lr 1.6e-2: every numerics diverges (x: rule trips)")  # fmt: skip
    for ax in (ax_logit, ax_div):
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
