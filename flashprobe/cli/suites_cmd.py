"""`flashprobe suites`: the bundled ablation suites, what each is for and what it costs."""

from __future__ import annotations

import typer

from flashprobe.cli import app
from flashprobe.reporting.render import check_format, render

COLUMNS = ["suite", "cells", "tokens", "time", "description"]
WIDTHS = {"time": 24, "description": 32}  # the table fits 100 columns (suite names to 20)


@app.command("suites")
def suites_command(
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
) -> None:
    """List the bundled suites with their description and estimated cost.

    Cost: the tokens every cell trains (a branched cell from its branch step) and, where the
    suite records a measured throughput, the time on that device. Run one by name:
    flashprobe ablate --config NAME (a path that exists wins over a bundled name);
    flashprobe ablate --config NAME --dry-run shows its plan on any machine.

    Examples:

      flashprobe suites

      flashprobe suites --format json
    """
    from flashprobe.runner.prepare import prepare_suite
    from flashprobe.suites.bundled import bundled_suites
    from flashprobe.suites.estimate import format_tokens, machine_device, suite_cost

    check_format(fmt)
    device = machine_device()
    rows = [
        suite_cost(prepare_suite(path, check_machine=False), device)
        for path in bundled_suites().values()
    ]
    if fmt == "table":
        rows = [{**row, "tokens": format_tokens(row["tokens"])} for row in rows]
    typer.echo(render(fmt, rows, columns=COLUMNS, widths=WIDTHS))
