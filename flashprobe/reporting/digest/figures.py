"""`flashprobe digest-report --plot DIR`: one PNG per figure (matplotlib, the `plot` extra).

Per suite (a panel per variant, the reference first; a colour per seed, the same in every
figure; a dotted vertical line at each divergence step):
    <suite>_loss_grad_norm.png     training loss and gradient norm (log) against step
    <suite>_max_logit.png          the largest attention logit over layers and heads (log)
    <suite>_tie_counts.png         tie events and P̄ = 1 entries, summed over layers and heads
    <suite>_outcomes.png           each run as a line from its first step to its end, marked by
                                   outcome: × diverged, ○ to the horizon, | cut; ▲ where its
                                   gradient norm ran away; a row per variant, its count beside it
    <suite>_softmax_sum_bias.png   ΣP − 1 of the backward's softmax (mean over layers) per run,
                                   its median before the divergence: a point per seed, by
                                   outcome (only when the runs recorded it)
Per chosen run (--cell VARIANT:SEED; default the reference's first diverged seed):
    <suite>_<variant>_seed<k>_spectral_norm.png         W_Q and W_K spectral norm per layer
                                                         (heatmap; ○ the rise, | divergence)
    <suite>_<variant>_seed<k>_attention_per_layer.png   max logit, tie events, P̄ = 1 per layer
Per replayed run (its digest holds its δ replay):
    <suite>_<variant>_seed<k>_delta_running_sum.png     the running sum of the δ error over the
                                                         captured steps before the divergence,
                                                         a panel per layer, a line per variant
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flashprobe.reporting.digest import attention as att
from flashprobe.reporting.digest.outcomes import (
    DIVERGED,
    NO_OUTCOME,
    NOT_DIVERGED,
    VariantOutcome,
    is_branch_stub,
    seed_outcome,
    step_text,
)
from flashprobe.reporting.digest.report import DigestSuiteReport
from flashprobe.reporting.digest.rise import RiseResult, trajectories
from flashprobe.reporting.digest.schema import DigestCell
from flashprobe.reporting.plots import require_matplotlib, top_title

PANELS_PER_ROW = 4
Series = list[tuple[int, float]]


SUITE_FIGURES = ("loss_grad_norm", "max_logit", "tie_counts", "outcomes", "softmax_sum_bias")
CHOSEN_FIGURES = ("spectral_norm", "attention_per_layer")  # per chosen run
REPLAYED_FIGURES = ("delta_running_sum",)  # per replayed run


def figure_path(
    out_dir: Path, report: DigestSuiteReport, figure: str, cell: DigestCell | None = None
) -> Path:
    """The file of one figure: <suite>_<figure>.png, or <suite>_<run>_<figure>.png of a run."""
    name = _safe(report.suite)
    if cell is not None:
        name += f"_{_safe(_cell_name(cell))}"
    return out_dir / f"{name}_{figure}.png"


def figure_paths(report: DigestSuiteReport, out_dir: Path) -> list[Path]:
    """Every file write_figures may write for the report (some only when the runs recorded
    what they show): what `--plot` refuses to overwrite."""
    paths = [figure_path(out_dir, report, f) for f in SUITE_FIGURES]
    paths += [figure_path(out_dir, report, f, c) for c in report.chosen for f in CHOSEN_FIGURES]
    paths += [figure_path(out_dir, report, f, c) for c in report.replayed for f in REPLAYED_FIGURES]
    return paths


def write_figures(report: DigestSuiteReport, out_dir: Path) -> list[Path]:
    """Write the suite's figures into out_dir (created); returns the files written."""
    plt = require_matplotlib()
    out_dir.mkdir(parents=True, exist_ok=True)
    horizon = report.horizon

    def png(figure: str, cell: DigestCell | None = None) -> Path:
        return figure_path(out_dir, report, figure, cell)

    written = [
        _per_variant(
            plt, report, png("loss_grad_norm"),
            [("training loss", False, lambda c: _loss(c, horizon, 1)),
             ("gradient norm", True, lambda c: _loss(c, horizon, 2))],
            "loss and gradient norm",
        ),
        _per_variant(
            plt, report, png("max_logit"),
            [("max attention logit", True,
              lambda c: att.max_series(att.records_until(c, horizon), "max_logit"))],
            "largest attention logit over layers and heads",
        ),
        _per_variant(
            plt, report, png("tie_counts"),
            [("tie events (all layers)", False,
              lambda c: att.total_series(att.records_until(c, horizon), "tie_events")),
             ("P̄ = 1 entries (all layers)", False,
              lambda c: att.total_series(att.records_until(c, horizon), "p_bar_ones"))],
            "tie events and P̄ = 1 entries, summed over layers and heads",
        ),
    ]  # fmt: skip
    written.append(_outcomes(plt, report, png("outcomes")))
    path = _sum_bias_by_outcome(plt, report, png("softmax_sum_bias"))
    if path is not None:
        written.append(path)
    for cell in report.chosen:
        rises = [r for r in report.rises if r.cell is cell]
        path = _spectral_heatmap(plt, cell, rises, horizon, png("spectral_norm", cell))
        if path is not None:
            written.append(path)
        path = _attention_layers(plt, cell, horizon, png("attention_per_layer", cell))
        if path is not None:
            written.append(path)
    for cell in report.replayed:
        path = _delta_running_sum(plt, cell, png("delta_running_sum", cell))
        if path is not None:
            written.append(path)
    return written


# -- per-variant panels ---------------------------------------------------------------------
def _per_variant(
    plt: Any,
    report: DigestSuiteReport,
    path: Path,
    quantities: Sequence[tuple[str, bool, Callable[[DigestCell], Series]]],
    title: str,
) -> Path:
    """One panel per (variant, quantity): a line per seed."""
    groups = _variants(report)
    colours = _seed_styles(report.cells)
    ncols = min(len(groups), PANELS_PER_ROW)
    blocks = math.ceil(len(groups) / ncols)
    nrows = blocks * len(quantities)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols + 0.8, 2.6 * nrows + 0.6),
                             squeeze=False, sharex=True)  # fmt: skip
    for g, (label, cells) in enumerate(groups):
        for q, (ylabel, log, pick) in enumerate(quantities):
            ax = axes[(g // ncols) * len(quantities) + q][g % ncols]
            drawn = False
            for cell in cells:
                pts = pick(cell)
                colour, style = colours[cell.seed]
                if pts:
                    _line(ax, pts, colour, style, f"seed {cell.seed}")
                    drawn = True
                step = cell.diverged_step
                if step is not None and (report.horizon is None or step < report.horizon):
                    ax.axvline(step, color=colour, ls=":", lw=1)
            if not drawn:
                ax.text(0.5, 0.5, "not in the digest", ha="center", va="center",
                        transform=ax.transAxes, color="grey")  # fmt: skip
            elif log and _positive(ax):
                ax.set_yscale("log")
            ax.set_title(label, fontsize=9)
            ax.set_ylabel(ylabel, fontsize=8)
            _step_axis(ax, fontsize=8)
            ax.tick_params(labelsize=7, labelbottom=True)
            _legend(ax)
    for k in range(len(groups), blocks * ncols):  # empty cells of the last row
        for q in range(len(quantities)):
            axes[(k // ncols) * len(quantities) + q][k % ncols].set_visible(False)
    room = top_title(fig, f"{report.suite}: {title} (dotted: divergence step)")
    return _save(plt, fig, path, room)


# -- outcomes -------------------------------------------------------------------------------
#: The run's end marker per outcome.
_END_MARKER = {DIVERGED: "X", NOT_DIVERGED: "o", NO_OUTCOME: "|"}


def outcome_rows(report: DigestSuiteReport) -> list[tuple[str, VariantOutcome]]:
    """(row label, its outcome) per variant and grid point, the reference first; a branch
    source trained only to its branch step is no row (its borrowed full runs are)."""
    rows = []
    for o in report.outcomes:
        seeds = tuple(s for s in o.seeds if not is_branch_stub(s.cell, report.branch))
        if not seeds:
            continue
        label = o.variant + (f" [{o.point}]" if o.point else "")
        if o.suite != report.suite:
            label += f" (suite {o.suite})"
        rows.append((label, dataclasses.replace(o, seeds=seeds)))
    return rows


def _outcomes(plt: Any, report: DigestSuiteReport, path: Path) -> Path:
    """A row per variant, a line per seed from its first logged step to its end."""
    rows = outcome_rows(report)
    colours = _seed_styles([s.cell for _, o in rows for s in o.seeds])
    fig, ax = plt.subplots(figsize=(9.5, 0.42 * len(rows) + 1.6))
    for y, (_, outcome) in enumerate(rows):
        seeds = outcome.seeds
        for i, seed in enumerate(seeds):
            at = y + 0.5 * (i - (len(seeds) - 1) / 2) / max(len(seeds), 2)
            colour = colours[seed.seed][0]
            first = seed.cell.loss[0][0] if seed.cell.loss else _start(seed.cell)
            end = seed.step if seed.horizon is None else min(seed.step, seed.horizon)
            ax.plot([first, end], [at, at], color=colour, lw=1.2)
            ax.plot([end], [at], marker=_END_MARKER[seed.status], color=colour, ms=7,
                    mfc="none" if seed.status != DIVERGED else colour, ls="none")  # fmt: skip
            if (runaway := seed.runaway) is not None:
                ax.plot([runaway.step], [at], marker="^", color=colour, ms=6, ls="none")
    if report.horizon is not None:
        ax.axvline(report.horizon, color="grey", ls="--", lw=0.8)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the reference on top
    for y, (_, o) in enumerate(rows):
        median = "" if o.median_step is None else f", median {step_text(o.median_step, ',')}"
        ax.annotate(f"{len(o.diverged)}/{o.n}{median}", (1.01, y),
                    xycoords=("axes fraction", "data"), va="center", fontsize=7)  # fmt: skip
    _step_axis(ax, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.lines import Line2D

    seeds = sorted(colours)
    ax.legend([Line2D([], [], color=colours[k][0]) for k in seeds], [f"seed {k}" for k in seeds],
              fontsize=7, ncol=min(len(seeds), 8), loc="lower center", bbox_to_anchor=(0.5, 1),
              frameon=False)  # fmt: skip
    room = top_title(fig, f"{report.suite}: each run to its end (× diverged, ○ not diverged, "
                     "| no outcome; ▲ gradient runaway); beside: diverged / n")  # fmt: skip
    return _save(plt, fig, path, room)


#: How each outcome is drawn: (marker, face colour, edge colour).
_OUTCOME_STYLE = {
    DIVERGED: ("X", "tab:red", "tab:red"),
    NOT_DIVERGED: ("o", "tab:blue", "tab:blue"),
    NO_OUTCOME: ("o", "none", "grey"),
}


def sum_bias_points(report: DigestSuiteReport) -> list[tuple[int, str, int, float, str]]:
    """(panel index, panel label, seed, median ΣP − 1 before the divergence, outcome) of each
    run that recorded ΣP − 1, panels as the other figures group them."""
    points = []
    for x, (label, cells) in enumerate(_variants(report)):
        for cell in sorted(cells, key=lambda c: c.seed):
            summary = att.summarise(cell, report.horizon)
            if summary is None or summary.sum_bias is None:
                continue
            status = seed_outcome(cell, report.horizon, report.branch).status
            points.append((x, label, cell.seed, summary.sum_bias, status))
    return points


def _sum_bias_by_outcome(plt: Any, report: DigestSuiteReport, path: Path) -> Path | None:
    """Per variant a point per seed: the run's median ΣP − 1 before its divergence, by
    outcome. None when no run recorded ΣP − 1."""
    found = sum_bias_points(report)
    if not found:
        return None
    groups = _variants(report)
    points = []  # (x, value, outcome): a panel's seeds side by side around its x
    for x in range(len(groups)):
        mine = [p for p in found if p[0] == x]
        for i, (_, _, _, value, status) in enumerate(mine):
            points.append((x + 0.12 * (i - (len(mine) - 1) / 2), value, status))
    fig, ax = plt.subplots(figsize=(max(5.5, 0.9 * len(groups) + 2.0), 4.4))
    for status, (marker, face, edge) in _OUTCOME_STYLE.items():
        mine = [(x, v) for x, v, s in points if s == status]
        if mine:
            xs, ys = zip(*mine, strict=True)
            ax.scatter(xs, ys, marker=marker, s=42, facecolors=face, edgecolors=edge,
                       label=status)  # fmt: skip
    if min(v for _, v, _ in points) > 0:
        ax.set_yscale("log")
    else:  # a negative bias: linear near zero
        ax.set_yscale("symlog", linthresh=1e-7)
    ax.set_xticks(range(len(groups)), [label for label, _ in groups], rotation=30, ha="right",
                  fontsize=7)  # fmt: skip
    ax.set_ylabel("ΣP − 1, median over records", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _legend(ax)
    room = top_title(fig, f"{report.suite}: ΣP − 1 of the backward's softmax per seed\n(mean "
                     "over layers, median over the records before the divergence)", 9)  # fmt: skip
    return _save(plt, fig, path, room)


def _variants(report: DigestSuiteReport) -> list[tuple[str, list[DigestCell]]]:
    """(panel label, its runs) per variant. A reference borrowed from another suite replaces
    its runs here (a branch source trained only to the branch step) with the borrowed ones."""
    out: dict[str, list[DigestCell]] = {}
    if report.borrowed:
        out[f"{report.reference} (suite {report.reference_suite})"] = sorted(
            report.borrowed, key=lambda c: c.seed
        )
    for cell in report.cells:  # sorted: the reference first, then by name, point, seed
        if report.borrowed and cell.variant == report.reference:
            continue
        label = cell.variant + (f" [{cell.point_label}]" if cell.point else "")
        out.setdefault(label, []).append(cell)
    return list(out.items())


def _start(cell: DigestCell) -> int:
    """Where a run without logged losses began: its branch step, else step 0."""
    step = cell.meta.get("branch_step")
    return step if isinstance(step, int) and cell.meta.get("branch_from") else 0


def _seed_styles(cells: Sequence[DigestCell]) -> dict[int, tuple[str, str]]:
    seeds = sorted({c.seed for c in cells})
    styles = ("-", "--", "-.", ":")
    return {s: (f"C{i % 10}", styles[(i // 10) % len(styles)]) for i, s in enumerate(seeds)}


def _loss(cell: DigestCell, horizon: int | None, column: int) -> Series:
    return [
        (row[0], float(row[column]))  # type: ignore[arg-type]
        for row in cell.loss
        if row[column] is not None and (horizon is None or row[0] < horizon)
    ]


# -- one run --------------------------------------------------------------------------------
def _spectral_heatmap(
    plt: Any, cell: DigestCell, rises: Sequence[RiseResult], horizon: int | None, path: Path
) -> Path | None:
    series = trajectories(cell, horizon)
    if not series:
        return None
    import numpy as np

    fig, axes = plt.subplots(1, len(series), figsize=(5.2 * len(series) + 0.6, 4.2),
                             squeeze=False)  # fmt: skip
    for ax, (matrix, trajectory) in zip(axes[0], series.items(), strict=True):
        steps = np.array(trajectory.steps, dtype=float)
        grid = np.full((trajectory.layers, len(steps)), np.nan)
        for j, values in enumerate(trajectory.values):
            for i, v in enumerate(values):
                grid[i, j] = np.nan if v is None else v
        edges = _edges(steps)
        mesh = ax.pcolormesh(edges, np.arange(trajectory.layers + 1) - 0.5, grid,
                             cmap="viridis", shading="flat")  # fmt: skip
        fig.colorbar(mesh, ax=ax, label="spectral norm")
        result = next((r for r in rises if r.trajectory.matrix == matrix), None)
        if result is not None:
            for layer in result.order:
                ax.plot([layer.rise_step], [layer.layer], "o", mfc="none", mec="white", ms=7)
        if cell.diverged_step is not None and (horizon is None or cell.diverged_step < horizon):
            ax.axvline(cell.diverged_step, color="red", lw=1.5, label="divergence")
            ax.legend(fontsize=7, loc="upper left")
        kind = "whole matrix" if trajectory.series in ("wq", "wk") else "largest head"
        ax.set_title(f"{matrix} ({kind})", fontsize=9)
        _step_axis(ax)
        ax.set_ylabel("layer (0-based)")
        ax.set_yticks(range(trajectory.layers))
        ax.tick_params(labelsize=7)
    rule = rises[0].rule if rises else None
    how = f"○ first record ≥ {rule.factor:g}× the reference" if rule else ""
    room = top_title(fig, f"{cell.suite}: {cell.label}, spectral norm per layer  {how}")
    return _save(plt, fig, path, room)


def _attention_layers(plt: Any, cell: DigestCell, horizon: int | None, path: Path) -> Path | None:
    records = att.records_until(cell, horizon)
    if not records:
        return None
    import matplotlib

    panels = (("max_logit", "max logit (over heads)", True), ("tie_events", "tie events", False),
              ("p_bar_ones", "P̄ = 1 entries", False))  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), squeeze=False)
    layers = sorted({layer for r in records for layer in r.max_logit})
    cmap = matplotlib.colormaps["viridis"]
    for ax, (name, ylabel, log) in zip(axes[0], panels, strict=True):
        series = att.layer_series(records, name)
        for layer in layers:
            if series.get(layer):
                colour = cmap(layer / max(1, len(layers) - 1))
                _line(ax, series[layer], colour, "-", f"layer {layer}")
        if not series:
            ax.text(0.5, 0.5, "not counted (sdpa / math) or not in the digest", ha="center",
                    va="center", transform=ax.transAxes, color="grey")  # fmt: skip
        elif log and _positive(ax):
            ax.set_yscale("log")
        if cell.diverged_step is not None and (horizon is None or cell.diverged_step < horizon):
            ax.axvline(cell.diverged_step, color="red", ls=":", lw=1.2)
        ax.set_title(ylabel, fontsize=9)
        _step_axis(ax)
        ax.tick_params(labelsize=7)
        _legend(ax, ncol=2)
    room = top_title(fig, f"{cell.suite}: {cell.label}, attention per layer (dotted: divergence)")
    return _save(plt, fig, path, room)


def _delta_running_sum(plt: Any, cell: DigestCell, path: Path) -> Path | None:
    """The paper's Fig. 5a per captured layer: Σ δ error (tokens, heads) summed over the
    captured steps before the divergence, one line per replayed variant."""
    replay = cell.replay
    if replay is None or replay.error is not None:
        return None
    series: dict[int, dict[str, Series]] = {}
    for variant, layer, d in replay.rows(before=cell.diverged_step):
        if d.running_sum is not None:
            series.setdefault(layer, {}).setdefault(variant, []).append((d.step, d.running_sum))
    if not series:
        return None
    variants = sorted(replay.variants, key=lambda v: v != cell.variant)  # the run's own first
    styles = ("-", "--", "-.", ":")
    cols = min(len(series), PANELS_PER_ROW)  # every layer captured: a grid, not a strip
    rows = -(-len(series) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols + 0.6, 4.0 * rows), squeeze=False)
    for ax in axes.flat[len(series) :]:
        ax.set_visible(False)
    panels = zip(axes.flat[: len(series)], sorted(series.items()), strict=True)
    for n, (ax, (layer, lines)) in enumerate(panels):
        for i, variant in enumerate(variants):
            if lines.get(variant):  # a marker at every capture: they are few and far apart
                xs, ys = zip(*lines[variant], strict=True)
                ax.plot(xs, ys, color=f"C{i % 10}", ls=styles[(i // 10) % len(styles)], lw=1,
                        marker="o", ms=4, label=variant)  # fmt: skip
        ax.axhline(0.0, color="grey", lw=0.8)
        if cell.diverged_step is not None:
            ax.axvline(cell.diverged_step, color="red", ls=":", lw=1.2, label="divergence")
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_ylabel("running sum of the δ error (Σ tokens, heads)", fontsize=8)
        _step_axis(ax, fontsize=8)
        ax.tick_params(labelsize=7)
        if n == 0 or len(series) <= 2:  # the same lines in every panel: one legend in a grid
            _legend(ax, ncol=2 if len(variants) > 8 else 1)
    room = top_title(fig, f"{cell.suite}: {cell.label}, δ − fp64 δ replayed on its captures "
                     "(dotted: divergence)")  # fmt: skip
    return _save(plt, fig, path, room)


# -- helpers --------------------------------------------------------------------------------
def _line(ax: Any, pts: Series, colour: Any, style: str, label: str) -> None:
    xs, ys = zip(*pts, strict=True)
    marker = "o" if len(pts) < 3 else None  # one or two points stay visible
    ax.plot(xs, ys, color=colour, ls=style, lw=1, marker=marker, ms=4, label=label)


def _step_axis(ax: Any, fontsize: float | None = None) -> None:
    """Steps are whole numbers: no 8.6, 8.8 ticks around a run's only record."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlabel("step (0-based)", fontsize=fontsize)


def _positive(ax: Any) -> bool:
    return all(min(line.get_ydata(), default=1) > 0 for line in ax.get_lines()
               if len(line.get_ydata()) and line.get_label()[:1] != "_")  # fmt: skip


def _edges(steps: Any) -> Any:
    """Cell edges around each recorded step (one step: ± half the default cadence)."""
    import numpy as np

    if len(steps) == 1:
        return np.array([steps[0] - 0.5, steps[0] + 0.5])
    mids = (steps[1:] + steps[:-1]) / 2
    return np.concatenate([[steps[0] - (mids[0] - steps[0])], mids,
                           [steps[-1] + (steps[-1] - mids[-1])]])  # fmt: skip


def _legend(ax: Any, ncol: int = 1) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=6, ncol=ncol)


def _cell_name(cell: DigestCell) -> str:
    point = f"_{cell.point_label}" if cell.point else ""
    return f"{cell.variant}{point}_seed{cell.seed}"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", text)


def _save(plt: Any, fig: Any, path: Path, title_room: float) -> Path:
    fig.tight_layout(rect=(0, 0, 1, 1 - title_room))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
