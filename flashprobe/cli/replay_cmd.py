"""`flashprobe replay`: run every kernel variant of a suite on its captured training tensors."""

from __future__ import annotations

import traceback
from pathlib import Path

import typer

from flashprobe.cli import app
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.render import check_format, render


@app.command("replay")
def replay_command(
    store: Path = typer.Argument(Path("runs"), help="Result store folder (default: runs)."),
    suite: str | None = typer.Option(None, "--suite", help="Only this suite (default: all)."),
    variant: list[str] = typer.Option(
        [], "--variant", help="Replay only these variants (repeatable; default: all)."
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
    unchanged replay (same captures, specs and backend) is skipped. Then `flashprobe report`.

    Examples:

      flashprobe replay

      flashprobe replay runs --suite smoke --backend emulator

      flashprobe replay runs --suite paper --sources all --force
    """
    from flashprobe.attribution.replay import ReplaySettings, replay_cells
    from flashprobe.store import reader as sr

    check_format(fmt)
    cells = sr.read_cells(store, suite)
    rows = []
    for name, members in sr.suites_of(cells).items():
        folder = sr.suite_dir(members[0])
        # Flags, then the suite's own `replay:` section (suite.json), then the roles the last
        # replay resolved (which may have been inferred).
        declared = (sr.read_suite_definition(folder) or {}).get("replay")
        declared = dict(declared) if isinstance(declared, dict) else {}
        roles = (sr.read_suite_replay(folder) or {}).get("roles") or {}
        for key in ("baseline", "safe", "components"):
            if not declared.get(key) and roles.get(key):
                declared[key] = roles[key]
        settings = ReplaySettings.from_suite(
            declared,
            baseline=baseline,
            safe=safe,
            variants=tuple(variant) or None,
            sources=sources,
            backend=backend,
        )
        try:
            outcome = replay_cells(
                members, settings, force=force, progress=lambda m: typer.echo(m, err=True)
            )
        except FlashprobeError as exc:
            raise FlashprobeError(f"suite {name}: {exc}") from None
        except (RuntimeError, ValueError, KeyError, IndexError, TypeError) as exc:
            # captures that do not fit their cell's config (a hand edit, another code version):
            # one line, as `ablate` says a failed replay; the training results stand
            last = traceback.format_exception_only(exc)[-1].strip().splitlines()[0]
            typer.echo(f"flashprobe: replay of suite {name} failed: {last}", err=True)
            raise SystemExit(1) from None
        for cell in outcome.cells:
            rows.append({"suite": name, **cell, "steps": ",".join(map(str, cell["steps"]))})
        for note in outcome.notes:
            typer.echo(f"note: {name}: {note}", err=True)
    typer.echo(render(fmt, rows, columns=["suite", "cell", "status", "steps"]))
