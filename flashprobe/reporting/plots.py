"""`flashprobe report --plot DIR`: PNG figures of a suite (matplotlib: the optional `plot` extra).

- <suite>_loss.png: training loss per variant and seed, × at the divergence step
- <suite>_spectral.png: W_Q / W_K spectral norm per layer over steps (mean over seeds)
- <suite>_delta_cumsum.png: running sum over captured steps of the δ error (paper Fig. 5a), per
  variant, at the baseline's hottest layer and head
- <suite>_ties.png: tied-maximum tiles and P̄ = 1 entries per step (mean over seeds)
- <suite>_logits.png: largest attention logit and largest key-shift leak over layers and heads
  per step (mean over seeds): logit growth and the backward error that can drive it
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.experiments import store_reader as sr

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


def write_plots(report: Any, out_dir: Path) -> list[Path]:
    """Write one suite report's figures into out_dir; returns the files written."""
    plt = require_matplotlib()
    out_dir.mkdir(parents=True, exist_ok=True)
    cells: Sequence[sr.CellView] = report.cells
    metrics = {c.name: sr.read_metrics(c) for c in cells}
    variants = list(dict.fromkeys(c.variant for c in cells))
    colours = {v: f"C{i % 10}" for i, v in enumerate(variants)}
    prefix = out_dir / report.suite
    written = []

    fig, ax = plt.subplots(figsize=(7, 4))
    for cell in cells:
        recs = [r for r in metrics[cell.name] if r.get("loss") is not None]
        ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], color=colours[cell.variant],
                lw=1, alpha=0.8, label=f"{cell.variant} s{cell.seed}")  # fmt: skip
        step = (cell.summary or {}).get("diverged_step")
        hit = [r["loss"] for r in recs if r["step"] == step]
        if step is not None and hit:
            ax.plot([step], hit, "x", color=colours[cell.variant], ms=9, mew=2)
    _finish(ax, "step", "training loss", f"{report.suite}: loss (× = divergence)")
    written.append(_save(fig, plt, Path(f"{prefix}_loss.png")))

    spectral = _mean_series(cells, metrics, _spectral_values)
    layers = sorted({layer for (_, layer, _) in spectral})
    if layers:
        fig, axes = plt.subplots(len(layers), 2, figsize=(9, 2.6 * len(layers)), squeeze=False)
        for (variant, layer, which), pts in sorted(spectral.items()):
            ax = axes[layers.index(layer)][0 if which == "wq" else 1]
            ax.plot(*zip(*pts, strict=True), color=colours[variant], label=variant)
            ax.set_title(f"layer {layer} {'W_Q' if which == 'wq' else 'W_K'}")
        for row in axes:
            for ax in row:
                _finish(ax, "step", "spectral norm", None)
        written.append(_save(fig, plt, Path(f"{prefix}_spectral.png")))

    if report.hotspots:
        hot = report.hotspots[0]
        fig, ax = plt.subplots(figsize=(7, 4))
        for doc in report.replay_docs:
            for s in doc.get("series", []):
                if (s["layer"], s["head"]) == (hot["layer"], hot["head"]):
                    ax.plot(s["steps"], s["delta_cumsum"], "o-", color=colours.get(s["variant"]),
                            label=f"{s['variant']} ({doc.get('source_cell')})")  # fmt: skip
        ax.axhline(0, color="grey", lw=0.5)
        title = f"cumulative δ error, layer {hot['layer']} head {hot['head']}"
        _finish(ax, "captured step", "Σ_steps Σ_tokens (δ − δ_fp64)", title)
        written.append(_save(fig, plt, Path(f"{prefix}_delta_cumsum.png")))

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
        for (variant, _, which), pts in sorted(series.items()):
            ax = axes[quantities.index(which)]
            ax.plot(*zip(*pts, strict=True), color=colours[variant], label=variant)
        for ax, title in zip(axes, titles, strict=True):
            if log:
                ax.set_yscale("log")
            _finish(ax, "step", ylabel, title)
        written.append(_save(fig, plt, Path(f"{prefix}_{name}.png")))
    return written


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
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=7)


def _save(fig: Any, plt: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
