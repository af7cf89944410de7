"""`flashprobe report --plot DIR`: PNG figures of a suite (matplotlib: the optional `plot` extra).

- <suite>_loss.png: training loss per variant and seed, × at the divergence step; under it the
  gradient norm, ○ where it ran away (attribution.runaway)
- <suite>_spectral.png: W_Q / W_K spectral norm per layer over steps (mean over seeds)
- <suite>_delta_cumsum.png: running sum over captured steps of the δ error (paper Fig. 5a), per
  variant, at the baseline's hottest layer and head
- <suite>_ties.png: tied-maximum tiles and P̄ = 1 entries per step (mean over seeds)
- <suite>_logits.png: largest attention logit and largest key-shift leak over layers and heads
  per step (mean over seeds): logit growth and the backward error that can drive it

Every figure lists the variants in one order (the baseline, then the others by name) with one
colour each; seeds of a variant differ by line style. A series with a single step (one
capture, one stats sample) is drawn as a marker on a step axis that stays readable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flashprobe.attribution.runaway import RUNAWAY_FACTOR, gradient_runaway
from flashprobe.errors import FlashprobeError
from flashprobe.store import reader as sr

INSTALL_HINT = "matplotlib is not installed; install the plot extra: pip install 'flashprobe[plot]'"


def require_matplotlib() -> Any:
    """pyplot on the Agg backend, or a one-line FlashprobeError saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise FlashprobeError(INSTALL_HINT) from None
    return plt


FIGURES = ("loss", "spectral", "delta_cumsum", "ties", "logits")


def figure_path(out_dir: Path, suite: str, figure: str) -> Path:
    """The file of one figure: <suite>_<figure>.png."""
    return out_dir / f"{suite}_{figure}.png"


def figure_paths(report: Any, out_dir: Path) -> list[Path]:
    """Every file write_plots may write for the report (some only when the runs recorded what
    they show): what `--plot` refuses to overwrite."""
    return [figure_path(out_dir, report.suite, figure) for figure in FIGURES]


def write_plots(report: Any, out_dir: Path) -> list[Path]:
    """Write one suite report's figures into out_dir; returns the files written."""
    plt = require_matplotlib()
    out_dir.mkdir(parents=True, exist_ok=True)
    cells: Sequence[sr.CellView] = report.cells
    metrics = {c.name: sr.read_metrics(c) for c in cells}
    variants = variant_order(report)
    rank = {v: i for i, v in enumerate(variants)}
    colours = {v: f"C{i % 10}" for i, v in enumerate(variants)}
    styles = seed_styles(cells)
    written = []

    # The loss, and under it the gradient norm: a slow blow-up short of the loss rule shows there.
    fig, (ax, grad_ax) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
    for cell in sorted(cells, key=lambda c: (rank[c.variant], c.seed)):
        style = {"color": colours[cell.variant], "linestyle": styles[cell.seed], "lw": 1,
                 "alpha": 0.8, "label": f"{cell.variant} s{cell.seed}"}  # fmt: skip
        recs = [r for r in metrics[cell.name] if r.get("loss") is not None]
        _line(ax, [r["step"] for r in recs], [r["loss"] for r in recs], **style)
        step = (cell.summary or {}).get("diverged_step")
        hit = [r["loss"] for r in recs if r["step"] == step]
        if step is not None and hit:
            ax.plot([step], hit, "x", color=colours[cell.variant], ms=9, mew=2)
        norms = [(r["step"], r["grad_norm"]) for r in metrics[cell.name]
                 if isinstance(r.get("grad_norm"), int | float) and r["grad_norm"] > 0]  # fmt: skip
        if norms:
            _line(grad_ax, *zip(*norms, strict=True), **style)
        if runaway := gradient_runaway(norms):
            grad_ax.plot([runaway.step], [runaway.grad_norm], "o", mfc="none",
                         color=colours[cell.variant], ms=9, mew=2)  # fmt: skip
    ax.tick_params(labelbottom=True)
    _finish(ax, "step", "training loss", f"{report.suite}: loss (× = divergence)")
    if grad_ax.get_lines():
        grad_ax.set_yscale("log")
    title = f"gradient norm (○ = runaway: ≥ {RUNAWAY_FACTOR:g}× its earlier median)"
    _finish(grad_ax, "step", "gradient norm", title)
    written.append(_save(fig, plt, figure_path(out_dir, report.suite, "loss")))

    spectral = _mean_series(cells, metrics, _spectral_values)
    layers = sorted({layer for (_, layer, _) in spectral})
    if layers:
        fig, axes = plt.subplots(len(layers), 2, figsize=(9, 2.6 * len(layers)), squeeze=False)
        for (variant, layer, which), pts in sorted(spectral.items(), key=_by(rank)):
            ax = axes[layers.index(layer)][0 if which == "wq" else 1]
            _line(ax, *zip(*pts, strict=True), color=colours[variant], label=_mean_label(variant))
            ax.set_title(f"layer {layer} {'W_Q' if which == 'wq' else 'W_K'}")
        for row in axes:
            for ax in row:
                _finish(ax, "step", "spectral norm", None)
        written.append(_save(fig, plt, figure_path(out_dir, report.suite, "spectral")))

    if report.hotspots:
        hot = report.hotspots[0]
        fig, ax = plt.subplots(figsize=(7, 4))
        found = [
            (doc, s)
            for doc in report.replay_docs
            for s in doc.get("series", [])
            if (s["layer"], s["head"]) == (hot["layer"], hot["head"])
        ]
        sources = list(dict.fromkeys(str(doc.get("source_cell")) for doc, _ in found))
        found.sort(
            key=lambda f: (rank.get(f[1]["variant"], len(rank)), str(f[0].get("source_cell")))
        )
        for doc, s in found:
            style = LINE_STYLES[sources.index(str(doc.get("source_cell"))) % len(LINE_STYLES)]
            label = f"{s['variant']} ({doc.get('source_cell')})"
            colour = colours.get(s["variant"])
            _line(ax, s["steps"], s["delta_cumsum"], marker="o", linestyle=style, color=colour,
                  label=label)  # fmt: skip
        ax.axhline(0, color="grey", lw=0.5)
        title = f"cumulative δ error, layer {hot['layer']} head {hot['head']}"
        _finish(ax, "captured step", "Σ_steps Σ_tokens (δ − δ_fp64)", title)
        written.append(_save(fig, plt, figure_path(out_dir, report.suite, "delta_cumsum")))

    panels = (
        (_tie_values, ("tie_events", "p_bar_ones"), "count (all layers and heads)", False, "ties",
         ("tied-maximum tiles per step", "P̄ = 1 entries per step")),
        (_logit_and_leak_values, ("max_logit", "key_shift_leak"), "max over layers and heads",
         True, "logits", ("largest attention logit", "largest key-shift leak ‖Σ_j dK_j‖ / ‖dK‖")),
    )  # fmt: skip
    for pick, quantities, ylabel, log, name, titles in panels:
        series = _mean_series(cells, metrics, pick)
        if not series:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for (variant, _, which), pts in sorted(series.items(), key=_by(rank)):
            ax = axes[quantities.index(which)]
            _line(ax, *zip(*pts, strict=True), color=colours[variant], label=_mean_label(variant))
        for ax, title in zip(axes, titles, strict=True):
            if log:
                ax.set_yscale("log")
            _finish(ax, "step", ylabel, title)
        written.append(_save(fig, plt, figure_path(out_dir, report.suite, name)))
    return written


LINE_STYLES = ("-", "--", ":", "-.")


def variant_order(report: Any) -> list[str]:
    """The order every figure lists variants in: the baseline, then the others by name (the
    same in every figure and every run of the report)."""
    present = {c.variant for c in report.cells}
    order = [report.roles.baseline, *sorted(present)]
    return [v for v in dict.fromkeys(order) if v in present]


def seed_styles(cells: Sequence[sr.CellView]) -> dict[int, str]:
    """A line style per seed (the n-th smallest seed gets the n-th style), so the seeds of one
    variant, which share its colour, stay apart."""
    seeds = sorted({c.seed for c in cells})
    return {seed: LINE_STYLES[i % len(LINE_STYLES)] for i, seed in enumerate(seeds)}


def _by(rank: Mapping[str, int]) -> Any:
    """Sort key of (variant, layer, quantity) series: variant order, then layer and quantity."""
    return lambda item: (rank.get(item[0][0], len(rank)), item[0][1], item[0][2])


def _mean_label(variant: str) -> str:
    return f"{variant} (mean over seeds)"


def _line(ax: Any, xs: Sequence[Any], ys: Sequence[Any], **style: Any) -> None:
    """A line, or a marker where the series has one point (a lone point draws no line)."""
    if len(xs) == 1 and "marker" not in style:
        style["marker"] = "o"
    ax.plot(xs, ys, **style)


def _spectral_values(record: Mapping[str, Any]) -> dict[tuple[int, str], float]:
    spectral = record.get("spectral") or {}
    out = {}
    for which in ("wq", "wk"):
        for layer, value in enumerate(spectral.get(which) or []):
            if value is not None:
                out[layer, which] = float(value)
    return out


def _tie_values(record: Mapping[str, Any]) -> dict[tuple[int, str], float]:
    attention = record.get("attention") or {}
    out: dict[tuple[int, str], float] = {}
    for which in ("tie_events", "p_bar_ones"):
        values = [v for layer in attention.values() for v in (layer.get(which) or [])
                  if v is not None]  # fmt: skip
        if values:
            out[-1, which] = float(sum(values))
    return out


def _logit_and_leak_values(record: Mapping[str, Any]) -> dict[tuple[int, str], float]:
    return {(-1, name): v for name, v in sr.attention_maxima(record).items() if v > 0}  # log axes


def _mean_series(
    cells: Sequence[sr.CellView], metrics: Mapping[str, list[dict[str, Any]]], pick: Any
) -> dict[tuple[str, int, str], list[tuple[int, float]]]:
    """(variant, layer, quantity) → [(step, mean over the variant's seeds)]."""
    sums: dict[tuple[str, int, str], dict[int, list[float]]] = {}
    for cell in cells:
        for record in metrics[cell.name]:
            for (layer, which), value in pick(record).items():
                key = (cell.variant, layer, which)
                sums.setdefault(key, {}).setdefault(record["step"], []).append(value)
    return {k: [(s, sum(v) / len(v)) for s, v in sorted(d.items())] for k, d in sums.items()}


def _finish(ax: Any, xlabel: str, ylabel: str, title: str | None) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    series = [line for line in ax.get_lines() if not str(line.get_label()).startswith("_")]
    steps = {x for line in series for x in line.get_xdata()}
    if len(steps) == 1:  # one captured step: centre it on a readable axis, not step ± 0.05
        (step,) = steps
        ax.set_xlim(step - 1, step + 1)
        ax.set_xticks([step])
    if ax.get_yscale() == "linear":
        ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=7)


def top_title(fig: Any, text: str, fontsize: float = 10) -> float:
    """Put the figure's title at its top edge; returns the share of the height it takes, for
    tight_layout's rect (matplotlib's default title sits 2% of the height down, and
    tight_layout ignores it: a tall figure's title covers its first row's panel titles)."""
    height = fig.get_figheight()
    fig.suptitle(text, fontsize=fontsize, y=1 - 0.05 / height, va="top")
    lines = text.count("\n") + 1
    return (lines * fontsize * 1.3 / 72 + 0.05) / height  # points → inches; tight_layout pads


def _save(fig: Any, plt: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
