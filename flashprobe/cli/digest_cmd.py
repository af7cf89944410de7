"""`flashprobe digest` (a store → one small JSON file) and `flashprobe digest-report` (several
digests → outcomes, mechanism metrics and figures)."""

from __future__ import annotations

from pathlib import Path

import typer

from flashprobe.cli import app
from flashprobe.cli.path_args import file_path, folder_path
from flashprobe.cli.plot_options import ForcePlot, PlotFolder, check_new_figures, check_plot_folder
from flashprobe.errors import FlashprobeError


@app.command("digest")
def digest_command(
    store: Path = typer.Argument(..., help="Result store folder.", parser=folder_path),
    out: Path = typer.Argument(..., help="The digest file to write (JSON).", parser=file_path),
    every: int = typer.Option(10, "--every", help="Keep about one loss record per N steps."),
    suite: str | None = typer.Option(None, "--suite", help="Only this suite of the store."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Write a digest of a result store: per cell its meta, config, summary, a thinned loss
    curve, the per-layer attention and spectral records and, for a run `flashprobe replay`
    replayed, its δ replay in compact form (what a device session brings back).

    Examples:

      flashprobe digest /tmp/quick results/quick.json

      flashprobe digest runs smoke.json --suite smoke --every 1
    """
    from flashprobe.reporting.digest.writer import write_digest

    count = write_digest(
        store, out, every=every, suite=suite, force=force,
        note=lambda line: typer.echo(f"note: {line}", err=True),
    )  # fmt: skip
    typer.echo(f"{count} cells → {out}")


@app.command("digest-merge")
def digest_merge_command(
    out: Path = typer.Argument(..., help="The merged digest to write (JSON).", parser=file_path),
    digests: list[Path] = typer.Argument(
        ..., help="Digest files, older first (two or more).", parser=file_path
    ),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Merge digests into one, keeping per variant, grid point and seed the run digest-report
    counts (a run with an outcome before a cut one, then the longest, then the latest); the
    superseded runs are listed and left out.

    Examples:

      flashprobe digest-merge claim.json claim.json session.json --force

      flashprobe digest-merge all.json a.json b.json
    """
    from flashprobe.reporting.digest.merge import merge_digests

    result = merge_digests(digests, out, force=force)
    for superseded in result.superseded:
        typer.echo(f"superseded: {superseded.describe()}")
    typer.echo(f"{result.kept} runs → {out} ({len(result.superseded)} superseded)")


@app.command("digest-report")
def digest_report_command(
    digests: list[Path] = typer.Argument(..., help="Digest files, older first.", parser=file_path),
    suite: str | None = typer.Option(None, "--suite", help="Only this suite."),
    horizon: int | None = typer.Option(
        None,
        "--horizon",
        help="Count every run's outcome after this many steps (0-based steps 0 … N-1): a "
        "divergence at step N or later does not count, and a run that trained fewer steps "
        "without diverging has none.",
    ),
    reference: str | None = typer.Option(
        None,
        "--reference",
        help="The variant the others are tested against (Fisher) and the control check's "
        "(default: the suite's declared baseline, when the digest has it). A suite without "
        "its runs takes them from another suite of the same training regime.",
    ),
    cells: list[str] | None = typer.Option(
        None, "--cell", help="VARIANT:SEED for the per-layer table and figures (repeat)."
    ),
    rise_from: int | None = typer.Option(
        None,
        "--rise-from",
        help="The rise rule's reference: the first spectral record at or after this step "
        "(default: each run's divergence.min_step, 0 without a config).",
    ),
    rise_factor: float = typer.Option(
        2.0, "--rise-factor", help="A layer rises when its norm reaches this × the reference."
    ),
    safe: str | None = typer.Option(
        None,
        "--safe",
        help="The ranking's add-design reference (default: the suite's replay.safe, else a "
        "variant named safe / fp32 or with the fp32 kernel, as `flashprobe report`).",
    ),
    plot: PlotFolder = None,
    force: ForcePlot = False,
    fmt: str = typer.Option("markdown", "--format", help="markdown, text or json."),
) -> None:
    """Report digests of several device sessions: per variant seeds, diverged, divergence
    steps and median, the steps reached by the others; the control check at twice the
    reference's median divergence step; the ranking of the components a restore / add suite
    changes (k/n failed, Fisher p, the replay's δ bias share, a reading) and the same runs
    pooled by switch value; which layer's W_Q / W_K spectral norm rises first and whether
    before the loss; tie and P̄ = 1 counts; max logits; the δ error's sign, t and running sum
    per variant and layer of the replayed runs.

    Each variant, grid point and seed counts once over all the digests: a finished run before a
    cut one, then its longest, then latest; the others are listed as superseded.

    Examples:

      flashprobe digest-report session-a.json session-b.json --reference paper-code

      flashprobe digest-report *.json --suite quick --horizon 3000 --plot figures/

      flashprobe digest-report *.json --plot figures/ --force

      flashprobe digest-report quick.json --cell fa2:0 --cell paper-code:0 --rise-from 500
    """
    from flashprobe.reporting.digest.report import build_digest_reports, load_digests
    from flashprobe.reporting.digest.rise import RiseRule
    from flashprobe.reporting.digest.tables import FORMATS, render_digest_reports

    if fmt not in FORMATS:
        raise FlashprobeError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if horizon is not None and horizon < 1:
        raise FlashprobeError(f"--horizon must be a step count >= 1, got {horizon}")
    rule = RiseRule(factor=rise_factor, reference_step=rise_from)
    check_plot_folder(plot, force)  # fail before reading anything
    reports = build_digest_reports(
        load_digests(digests),
        suite=suite,
        horizon=horizon,
        reference=reference,
        rule=rule,
        chosen=cells or (),
        safe=safe,
    )
    if plot is not None:
        from flashprobe.reporting.digest.figures import figure_paths

        check_new_figures((f for report in reports for f in figure_paths(report, plot)), force)
    typer.echo(render_digest_reports(reports, fmt))
    if plot is not None:
        from flashprobe.reporting.digest.figures import write_figures

        for report in reports:
            for path in write_figures(report, plot):
                typer.echo(f"wrote {path}", err=True)
