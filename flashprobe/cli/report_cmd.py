"""`flashprobe report`: summary, ranking, pooled switches, mechanism metrics and hot spots of a
result store."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from flashprobe.cli import app
from flashprobe.cli.path_args import folder_path
from flashprobe.cli.plot_options import ForcePlot, PlotFolder, check_new_figures, check_plot_folder
from flashprobe.errors import FlashprobeError


@app.command("report")
def report_command(
    store: Path = typer.Argument(
        Path("runs"), help="Result store folder (default: runs).", parser=folder_path
    ),
    suite: str | None = typer.Option(None, "--suite", help="Only this suite of the store."),
    fmt: str = typer.Option("table", "--format", help="table, markdown, csv or json."),
    table: str | None = typer.Option(
        None,
        "--table",
        help="With --format csv: summary, ranking (default), pooled, metrics or hotspots.",
    ),
    plot: PlotFolder = None,
    force: ForcePlot = False,
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="The failing baseline variant (default: from the replay, the "
        "branch source, or a variant named baseline/fa2).",
    ),
    safe: str | None = typer.Option(
        None,
        "--safe",
        help="The all-safe variant of a one-factor-in design (default: a "
        "variant named safe/all-safe/fp32, or the fp32 kernel).",
    ),
    top: int = typer.Option(8, "--top", help="Hot spots (layer, head) to list."),
    wide: bool = typer.Option(
        False,
        "--wide",
        help="Text tables at full width, one per section (default: at most 100 columns, wide "
        "tables split into parts that repeat the variant column, text wrapped).",
    ),
    failure: str | None = typer.Option(
        None,
        "--failure",
        help="What the ranking counts as a failed run: divergence (the run's divergence rule) "
        "or logit-runaway (a max attention logit above --logit-limit, or a divergence first) "
        "or gradient-runaway (the gradient norm at 100× its earlier median, or a divergence "
        "first). "
        "Default: the suite's failure: section, else divergence.",
    ),
    logit_limit: float | None = typer.Option(
        None, "--logit-limit", help="With --failure logit-runaway: the logit limit (1000)."
    ),
    failure_layers: list[int] | None = typer.Option(
        None, "--failure-layer", help="With --failure logit-runaway: only this layer (repeat)."
    ),
    horizon: int | None = typer.Option(
        None,
        "--horizon",
        help="Count every run's outcome after this many steps (0-based steps 0 … N-1): a failure "
        "at step N or later does not count, and a run that trained fewer steps without failing "
        "has none (compares runs of different lengths). "
        "Default: the suite's failure.horizon, else as far as each run went.",
    ),
) -> None:
    """Rank which kernel component explains a suite's divergence, from a result store.

    Reads every cell (training outcome per seed) and the replay results (`flashprobe replay`);
    a partially finished store is reported as far as it goes, with what is missing. Each
    variant, grid point and seed counts once: when the store holds several runs of it (a
    rerun with more steps, or after a code change), a run with an outcome before a cut one,
    then its longest, then latest; the notes name the others.

    Examples:

      flashprobe report

      flashprobe report runs --suite smoke --format markdown

      flashprobe report runs --wide

      flashprobe report runs --format csv --table metrics

      flashprobe report runs --plot figures/

      flashprobe report runs --plot figures/ --force

      flashprobe report runs --failure logit-runaway --logit-limit 1000 --failure-layer 1

      flashprobe report runs --suite quick --horizon 2500
    """
    from flashprobe.reporting.report import build_reports
    from flashprobe.reporting.report_tables import FORMATS, TABLES, render_reports

    if fmt not in FORMATS:
        raise FlashprobeError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if table is not None and fmt != "csv":
        raise FlashprobeError(f"--table applies to --format csv only (got --format {fmt})")
    if wide and fmt != "table":  # markdown is never fitted; csv and json are not tables of text
        raise FlashprobeError(f"--wide applies to --format table only (got --format {fmt})")
    table = table or "ranking"
    if failure != "logit-runaway" and (logit_limit is not None or failure_layers):
        given = "--logit-limit" if logit_limit is not None else "--failure-layer"
        raise FlashprobeError(f"{given} applies to --failure logit-runaway only")
    if table not in TABLES:
        raise FlashprobeError(f"--table must be one of {', '.join(TABLES)}, got {table!r}")
    if top < 0:
        raise FlashprobeError(f"--top must be >= 0, got {top}")
    for flag, name in (("--baseline", baseline), ("--safe", safe)):
        if name is not None and not name.strip():
            raise FlashprobeError(f"{flag} is empty: name a variant of the suite")
    if horizon is not None and horizon < 1:
        raise FlashprobeError(f"--horizon must be a step count >= 1, got {horizon}")
    check_plot_folder(plot, force)  # fail before reading anything
    rule = None
    if failure is not None:
        from flashprobe.attribution.failure import FailureRule

        layers = tuple(failure_layers) if failure_layers else None
        rule = FailureRule(failure, layers=layers)  # the rule's own default limit unless given
        if logit_limit is not None:
            rule = dataclasses.replace(rule, logit_limit=logit_limit)
    reports = build_reports(
        store, suite, baseline=baseline, safe=safe, top=top, failure=rule, horizon=horizon
    )
    if plot is not None:
        from flashprobe.reporting.plots import figure_paths

        check_new_figures((f for report in reports for f in figure_paths(report, plot)), force)
    typer.echo(render_reports(reports, fmt, table, wide=wide))
    if plot is not None:
        from flashprobe.reporting.plots import write_plots

        for report in reports:
            for path in write_plots(report, plot):
                typer.echo(f"wrote {path}", err=True)
