"""`flashprobe replay`: run every kernel variant of a suite on its captured training tensors."""

from __future__ import annotations

from pathlib import Path

import typer

from flashprobe.cli import app
from flashprobe.cli.path_args import folder_path
from flashprobe.reporting.render import check_format, render


@app.command("replay")
def replay_command(
    store: Path = typer.Argument(
        Path("runs"), help="Result store folder (default: runs).", parser=folder_path
    ),
    suite: str | None = typer.Option(None, "--suite", help="Only this suite (default: all)."),
    variant: list[str] = typer.Option(
        [], "--variant", help="Replay only these variants (repeatable; default: all)."
    ),
    variants_from: str | None = typer.Option(
        None,
        "--variants-from",
        help="Also replay the variants of this suite file (a path or a bundled suite name), "
        "untrained, on the store's captures.",
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", help="The failing baseline, whose captures are replayed."
    ),
    safe: str | None = typer.Option(None, "--safe", help="The all-safe variant (ranking)."),
    sources: str | None = typer.Option(
        None, "--sources", help="Whose captures: baseline (default) or all cells."
    ),
    backend: str | None = typer.Option(
        None, "--backend", help="auto (triton on CUDA, else emulator), emulator or triton."
    ),
    force: bool = typer.Option(False, "--force", help="Replay even when results are current."),
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
) -> None:
    """Replay kernel variants on captured Q, K, V, dO and measure error mechanisms.

    Writes replay.json into each replayed cell and into the suite folder (atomically); an
    unchanged replay (same captures, variants, specs and backend) is skipped. --variant adds
    to the earlier replay of the same captures and backend (its other variants are kept). Then
    `flashprobe report`.

    --variants-from replays another suite file's variants (expanded as `ablate -c` would)
    beside the store's own without training them; each must fit the captures. --variant may
    also name a variant declared in the store's suite.json but never trained.

    Examples:

      flashprobe replay

      flashprobe replay runs --suite smoke --backend emulator

      flashprobe replay runs --suite paper --sources all --force

      flashprobe replay runs --suite quick --variants-from adamw-attribution
    """
    from flashprobe.attribution.replay import replay_suites

    check_format(fmt)
    replays = replay_suites(
        store,
        suite,
        force=force,
        progress=lambda m: typer.echo(m, err=True),
        variants_from=variants_from,
        baseline=baseline,
        safe=safe,
        variants=tuple(variant) or None,
        sources=sources,
        backend=backend,
    )
    rows = []
    for name, outcome in replays:
        for cell in outcome.cells:
            rows.append({"suite": name, **cell, "steps": ",".join(map(str, cell["steps"]))})
        for note in outcome.notes:
            typer.echo(f"note: {name}: {note}", err=True)
    typer.echo(render(fmt, rows, columns=["suite", "cell", "status", "steps"]))
