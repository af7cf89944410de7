"""`flashprobe logit-scale --plot FILE.png`: O and dQ error against fp64 over the max logit."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.atomic import check_new_files, check_output_folder, write_bytes_atomic
from flashprobe.reporting.plots import require_matplotlib, top_title

PANELS = (("o", "O"), ("dq", "dQ"))


def check_plot_path(path: Path, force: bool = False) -> None:
    """Refuse, before any work, a figure path that is not a .png file name, whose folder cannot
    be created or written, that is a folder, or that exists (unless force)."""
    if path.suffix.lower() != ".png":
        raise FlashprobeError(f"--plot must name a .png file, got {path}")
    if path.is_dir():
        raise FlashprobeError(f"{path} is a folder, not a file")
    if not force:
        check_new_files([path], "--force replaces it")
    check_output_folder(path.parent, "--plot")


def write_logit_scale_plot(report: Any, path: Path) -> Path:
    """One panel per quantity, log-log: each variant's mean relative error over seeds against
    the max logit; the same-dtype PyTorch attention dashed black."""
    from flashprobe.probes.logit_scale import TORCH_REFERENCE

    plt = require_matplotlib()
    series: dict[str, list[Any]] = {}
    for row in report.rows:
        series.setdefault(row.variant, []).append(row)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(12, 5.2), sharex=True)
    colours = plt.get_cmap("tab20")
    for ax, (quantity, label) in zip(axes, PANELS, strict=True):
        for i, (variant, rows) in enumerate(series.items()):
            points = [(r.max_logit, r.mean(quantity)) for r in rows if r.mean(quantity)]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            if variant == TORCH_REFERENCE:
                style = {"color": "black", "linestyle": "--", "linewidth": 1.6}
            else:
                style = {"color": colours(i % 20), "marker": "o", "markersize": 3}
            ax.plot(xs, ys, label=variant, **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("largest |logit| per head")
        ax.set_ylabel(f"relative L2 error of {label} vs fp64")
        ax.grid(True, which="major", alpha=0.3)
    axes[-1].legend(fontsize=7, ncol=2)
    c = report.config
    room = top_title(
        fig,
        f"Attention error against fp64 as the logits grow (seeds {', '.join(map(str, c.seeds))};"
        f" {c.heads} heads × {c.seq} tokens, d {c.head_dim}, bf16 inputs)",
        12,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - room))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, buffer.getvalue())
    return path
