"""The logit-runaway tables and figures of docs/findings.md, from a store digest.

    python scripts/plot_runaway.py docs/results/runaway-2500-steps.json OUT.png \
        [--limit 1000] [--horizon 3000] [--force]

Prints, per variant and seed, the first sampled step at which the layer-1 max attention logit
exceeds the limit (the runaway), how many seeds failed within the horizon's steps (0-based
steps below it, as `flashprobe report --horizon`) as ablations/quick.yaml's rule counts it (a
runaway, or a divergence first; 3000 steps; a seed that stopped earlier without failing has no
outcome), where the
loss rule tripped, the last step recorded and the median layer-1 key-shift leak over steps
≤ 1000 (before any runaway). The figure has one panel
per variant: the layer-1 max logit of each seed against the step, log scale; and one of the
training loss (mean of the seeds) of every variant.

Reads the format-1 digest of docs/results/runaway-*.json (a JSON list of cells with
per-layer max_logit rows), not the current `flashprobe digest` format. OUT's extension picks
the image format (.png, .pdf, .svg, ...); an OUT that exists is refused unless --force.
Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import io
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.backends.backend_agg import FigureCanvasAgg

from flashprobe.errors import FlashprobeError, OneLineParser
from flashprobe.json_io import read_json_file
from flashprobe.reporting.atomic import check_new_files, check_output_folder, write_bytes_atomic
from flashprobe.reporting.digest.schema import FORMAT

ORDER = (
    "paper-code", "delta-o-fp32", "untiled", "l-fp32", "acc-fp32", "fa2", "fa2-l-bf16", "fp32",
    "paper-sfa", "paper-sfa-beta-1.125",
)  # fmt: skip
STYLES = {0: "-", 1: "--", 2: ":"}
#: The image formats OUT's extension may name.
IMAGE_FORMATS = tuple(sorted(FigureCanvasAgg.get_supported_filetypes()))
EXPECTED = (
    "the format-1 digest of docs/results/runaway-*.json: a JSON list of cells, each with meta "
    "(variant, seed), summary, loss and max_logit"
)


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell_problem(cell: Any) -> str | None:
    """What keeps one format-1 cell from being plotted, or None."""
    if not isinstance(cell, dict):
        return "is not an object"
    missing = [key for key in ("meta", "summary", "loss", "max_logit") if key not in cell]
    if missing:
        return f"has no {missing[0]}"
    meta, summary = cell["meta"], cell["summary"]
    if not (isinstance(meta, dict) and isinstance(meta.get("variant"), str)
            and _is_step(meta.get("seed"))):  # fmt: skip
        return "has no meta.variant (text) and meta.seed (integer)"
    if summary is not None and not isinstance(summary, dict):
        return "has a summary that is not an object"
    for key in ("diverged_step", "steps_done"):
        if summary and summary.get(key) is not None and not _is_step(summary[key]):
            return f"has a summary.{key} that is not a step"
    loss = cell["loss"]
    if not isinstance(loss, list) or not all(
        isinstance(row, list) and len(row) >= 2 and _is_step(row[0])
        and (row[1] is None or _is_number(row[1])) for row in loss
    ):  # fmt: skip
        return "has a loss that is not a list of [step, loss, ...] rows"
    rows = cell["max_logit"]
    if not isinstance(rows, list) or not all(
        isinstance(row, list) and row and _is_step(row[0])
        and all(x is None or (isinstance(x, dict)
                              and all(v is None or _is_number(v) for v in x.values()))
                for x in row[1:])
        for row in rows
    ):  # fmt: skip
        return "has a max_logit that is not a list of [step, {layer: value}, ...] rows"
    return None


def read_cells(path: Path) -> list[dict]:
    """The cells of a format-1 digest; a FlashprobeError naming the file and the problem."""
    data = read_json_file(path, "digest")
    if isinstance(data, dict) and data.get("format") == FORMAT:
        raise FlashprobeError(
            f"{path} is a format-{data.get('version')} digest, which this script cannot plot; "
            f"it expects {EXPECTED}"
        )
    if not isinstance(data, list):
        raise FlashprobeError(f"not a digest this script can plot: {path} (expected {EXPECTED})")
    if not data:
        raise FlashprobeError(f"{path} holds no cells")
    for index, cell in enumerate(data):
        problem = _cell_problem(cell)
        if problem:
            raise FlashprobeError(f"{path}: cell {index} {problem} (expected {EXPECTED})")
    return data


def check_output(out: str, force: bool) -> Path:
    """OUT as a path, refused before any work: empty, a folder, an extension that names no
    image format, a file that exists (without --force), a folder that cannot be made."""
    if not out:
        raise FlashprobeError("OUT is empty; give an image file such as runaway.png")
    path = Path(out)
    if path.is_dir():
        raise FlashprobeError(f"OUT {path} is a folder; give an image file such as runaway.png")
    kind = path.suffix.removeprefix(".").lower()
    if kind not in IMAGE_FORMATS:
        what = f"extension .{kind} is not an image format" if kind else "has no extension"
        raise FlashprobeError(
            f"OUT {path}: {what}; give one of {', '.join('.' + f for f in IMAGE_FORMATS)}"
        )
    if not force:
        check_new_files([path], "--force replaces it")
    check_output_folder(path.parent, f"OUT {path}:")
    return path


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.split("\n")[0])
    parser.add_argument("digest", type=Path, help="format-1 digest (docs/results/runaway-*.json)")
    parser.add_argument("out", help="the figure: an image file (.png, .pdf, .svg, ...)")
    parser.add_argument("--limit", type=float, default=1000.0, help="the runaway's max logit")
    parser.add_argument("--horizon", type=int, default=3000, help="steps the failures count in")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = parser.parse_args(argv)
    if not args.limit > 0 or args.limit == float("inf"):
        parser.error(f"--limit must be a positive number, got {args.limit}")
    if args.horizon < 1:
        parser.error(f"--horizon must be a step count >= 1, got {args.horizon}")
    try:
        out = check_output(args.out, args.force)
        cells = read_cells(args.digest)
    except FlashprobeError as exc:
        parser.error(str(exc))
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
            if not points:  # no layer-1 max logit recorded
                continue
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
        series = [{s: x for s, x, *_ in c["loss"] if x is not None} for c in by_variant[variant]]
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
    image = io.BytesIO()
    fig.savefig(image, format=out.suffix.removeprefix(".").lower(), dpi=110)
    try:  # via a temporary file: an interrupted save leaves no half-written figure
        write_bytes_atomic(out, image.getvalue())
    except FlashprobeError as exc:
        parser.error(str(exc))
    print(f"figure → {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
