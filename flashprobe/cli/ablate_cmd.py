"""`flashprobe ablate`: run an ablation suite into a result store, then print a summary table."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from flashprobe.cli import app
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.render import check_format, render

if TYPE_CHECKING:  # imported lazily at run time: `flashprobe --version` stays fast
    from flashprobe.runner.plan import PlannedCell
    from flashprobe.store.result_store import ResultStore

COLUMNS = [
    "variant",
    "point",
    "seed",
    "status",
    "diverged",
    "step",
    "final_loss",
    "min_loss",
    "final_val_loss",
    "tokens_per_s",
    "cell",
]
HEADERS = {
    "final_loss": "final loss",
    "min_loss": "min loss",
    "final_val_loss": "val loss",
    "tokens_per_s": "tok/s",
    "point": "axes",
}


@app.command("ablate")
def ablate_command(
    config: str = typer.Option(
        ...,
        "--config",
        "-c",
        help="Suite YAML file, or a bundled suite's name (gpt2, quick, smoke: flashprobe suites).",
    ),
    overrides: list[str] = typer.Option(
        [],
        "--set",
        help="KEY=VALUE (repeatable): a run-config key for every cell (train.steps=100, "
        "kernel.beta=4), or a suite edit: seeds=[0,1], branch.step=50, "
        "variants.sfa.kernel.beta=4, axes.optimizer.lr=[1e-3,2e-3].",
    ),
    variants: list[str] = typer.Option(
        [],
        "--variant",
        help="Run only this variant (repeatable); its branch source runs too.",
    ),
    store: Path = typer.Option(Path("runs"), "--store", help="Result store folder."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue interrupted cells from their latest checkpoint."
    ),
    restart: bool = typer.Option(
        False, "--restart", help="Start interrupted cells over (their training output is deleted)."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Validate the suite and print what would run, with its tokens and (where a "
        "throughput was measured) time; write nothing. What only the machine that runs it can "
        "check (a CUDA GPU, the data folder) is listed, not refused.",
    ),
    no_replay: bool = typer.Option(
        False, "--no-replay", help="Skip the replay the suite's replay: section asks for."
    ),
    fmt: str = typer.Option("table", "--format", help="Summary as table, json or csv."),
    log_every: int | None = typer.Option(
        None,
        "--log-every",
        min=0,
        metavar="N",
        help="When stderr is not a terminal (a log file): a progress line every N steps with "
        "the cell's and the suite's ETA (default: about ten per cell; 0: one line per cell).",
    ),
    jobs: int = typer.Option(
        1,
        "--jobs",
        "-j",
        min=1,
        metavar="N",
        help="Train in N processes side by side (each runs --shard k/N; logs in "
        "STORE/<suite>/logs/), then summarise and replay as usual: small models share one "
        "big GPU better.",
    ),
    shard: str | None = typer.Option(
        None,
        "--shard",
        metavar="K/N",
        help="Run only shard K (0-based) of N: the units numbered K, K+N, K+2N, ... in run "
        "order (a unit: one cell, or with a branch one (grid point, seed) group, so a branched "
        "variant runs with its source). No replay.",
    ),
) -> None:
    """Train every cell (variant × axis point × seed) of an ablation suite.

    Each cell gets a folder STORE/<suite>/<variant>--<hash> keyed by its resolved config and the
    code version: finished cells are skipped, interrupted ones need --resume or --restart. A
    cell run to a longer horizon (--set train.steps=N) continues the finished shorter run of
    itself from its final checkpoint (action "extend") where that gives the numbers of a run
    from scratch: a schedule that does not depend on train.steps, the same code and config. The
    whole suite is validated first: a bad key or value anywhere exits 2 with one line and writes
    nothing. Progress goes to stderr; the summary table to stdout. Exit 1 if a cell failed.
    Under torchrun every rank runs the suite and rank 0 writes the store.

    The suite as run (after --set) is saved as STORE/<suite>/suite.json. When the suite has a
    replay: section, every finished cell is then replayed (as `flashprobe replay` would; rank 0,
    not with --dry-run or --no-replay) and one line says where the results are, so
    `flashprobe report` shows the ranking. Exit 1 also if that replay fails.

    --jobs N trains the suite in N processes side by side on the same store (a small model
    leaves a big GPU mostly idle: 3 processes on one H200 train about 1.6x as fast as one).
    Process k runs `flashprobe ablate --shard k/N` with the same suite arguments and logs to
    STORE/<suite>/logs/shard-k-of-N.log; one line on stderr says when each starts and ends.
    The summary, replay and exit code then come as without --jobs; exit 1 if a process failed.
    Ctrl-C stops them all (continue with --resume). Not under torchrun.

    --shard K/N runs only the units numbered K, K+N, K+2N, ... in run order: single cells, or
    when the suite branches whole (grid point, seed) groups (a branched variant with its
    source), e.g. one shard per machine on a shared store; the N shards together are the whole
    suite. A shard does not replay: run `flashprobe replay` once
    every shard is done.

    Examples:

      flashprobe ablate --config smoke.yaml

      flashprobe ablate --config ablations/smoke.yaml

      flashprobe ablate --config ablations/smoke.yaml --set seeds=[0] --store /tmp/runs

      flashprobe ablate -c ablations/gpt2.yaml --set data.path=/data/openwebtext --resume

      flashprobe ablate -c ablations/quick.yaml --jobs 3

      flashprobe ablate -c ablations/quick.yaml --shard 0/2 --store /shared/runs

      torchrun --nproc_per_node 4 -m flashprobe ablate -c ablations/gpt2.yaml --set data.path=...
    """
    from flashprobe.runner.definition import write_suite_definition
    from flashprobe.runner.parallel import (
        check_jobs,
        child_command,
        trained_as_done,
        watch_parent,
    )
    from flashprobe.runner.plan import code_version, plan_suite
    from flashprobe.runner.prepare import prepare_suite, replay_settings, select_variants
    from flashprobe.runner.replay_after_run import replay_finished
    from flashprobe.runner.shards import parse_shard, select_shard
    from flashprobe.runner.training import run_plan, suite_session
    from flashprobe.store.result_store import ResultStore

    watch_parent()  # a --jobs shard process: stop when the parent is gone
    check_format(fmt)
    check_jobs(jobs)
    part = parse_shard(shard) if shard is not None else None
    if part is not None and jobs > 1:
        raise FlashprobeError("--jobs starts its own shards; give --shard or --jobs, not both")
    full = prepare_suite(config, overrides, check_machine=not dry_run)
    settings = None if no_replay else replay_settings(full, check_machine=not dry_run)
    suite = select_variants(full, variants)
    if part is not None:
        suite = select_shard(suite, *part)
        if settings is not None and not dry_run:
            typer.echo(
                f"replay: not in a shard; run `flashprobe replay {store} --suite {suite.name}` "
                "once every shard is done",
                err=True,
            )
        settings = None
    version = code_version()
    result_store = ResultStore(store)
    plan = plan_suite(suite, result_store, version=version, resume=resume, restart=restart)
    main_rank = int(os.environ.get("RANK", "0")) == 0
    if dry_run:
        from flashprobe.cli.ablate_plan import render_plan
        from flashprobe.runner.prepare import machine_problems

        problems = machine_problems(suite)
        rows = [_plan_row(p) for p in plan]
        typer.echo(render_plan(fmt, plan, suite, rows, problems))
        for problem in problems if fmt != "table" else ():
            typer.echo(f"flashprobe: not checked here: {problem}", err=True)
        return

    from flashprobe.cli.ablate_progress import ProgressDisplay

    if main_rank:
        write_suite_definition(result_store, full, overrides)
    trained = [p.path for p in plan if p.action != "skip"] if jobs > 1 else []
    if trained:  # the shard processes train; then this one reads their cells back
        command = functools.partial(
            child_command,
            config=config,
            overrides=overrides,
            variants=variants,
            store=result_store.root,
            resume=resume,
            restart=restart,
        )
        _run_jobs(jobs, plan, result_store, suite.name, command)
        plan = plan_suite(suite, result_store, version=version, resume=resume, restart=restart)
        left = [p for p in plan if p.action != "skip"]
        if left:  # the suite file or the code version (git commit) changed meanwhile
            typer.echo(
                f"flashprobe: the shard processes left {len(left)} of {len(plan)} cells "
                f"unfinished ({left[0].cell.name} first); did the suite file or the git "
                "commit change meanwhile?",
                err=True,
            )
            raise SystemExit(1)
    display = ProgressDisplay(every=log_every) if main_rank and not trained else None
    with suite_session(plan):
        try:
            outcomes = run_plan(plan, result_store, version=version, events=display)
        except KeyboardInterrupt:
            if display is not None:
                display.close()
            typer.echo(
                "flashprobe: interrupted; rerun with --resume to continue the unfinished cell",
                err=True,
            )
            raise SystemExit(130) from None
        finally:
            if display is not None:
                display.close()
        if not main_rank:
            return
        outcomes = trained_as_done(outcomes, trained)
        replay = None
        if settings is not None:
            live = display is not None and display.live
            say = display.console.print if live and display is not None else None
            replay = replay_finished(result_store, suite, outcomes, settings=settings, progress=say)
    rows = [_outcome_row(o) for o in outcomes]
    document = {
        "suite": suite.name,
        "store": str(result_store.root / suite.name),
        "code_version": version,
        "cells": [
            {**row, "path": str(o.planned.path), "message": o.message, "summary": o.summary}
            for row, o in zip(rows, outcomes, strict=True)
        ],
        "replay": replay.to_dict() if replay is not None else None,
    }
    typer.echo(render(fmt, rows, document=document, columns=COLUMNS, headers=HEADERS))
    if fmt == "table":
        counts = {s: sum(o.status == s for o in outcomes) for s in ("done", "cached")}
        typer.echo(
            f"\n{len(outcomes)} cells ({counts['done']} run, {counts['cached']} cached) in "
            f"{result_store.root / suite.name}"
        )
        for o in outcomes:
            if o.message:
                typer.echo(f"- {o.planned.cell.name}: {o.status.replace('_', ' ')}: {o.message}")
    if replay is not None and fmt != "json":  # csv: stdout stays one table
        typer.echo(_replay_line(replay, result_store.root), err=fmt == "csv")
    if any(o.status in ("failed", "not_run") for o in outcomes):
        raise SystemExit(1)
    if replay is not None and replay.status == "failed":
        raise SystemExit(1)


def _run_jobs(
    jobs: int,
    plan: Sequence[PlannedCell],
    store: ResultStore,
    suite: str,
    command: Callable[[int, int], list[str]],
) -> None:
    """Train the plan in `jobs` shard processes; exit 1 if one failed, 130 on Ctrl-C."""
    from flashprobe.runner.parallel import plan_shards, run_shards

    shards = plan_shards(plan, jobs, store_root=store.root, suite=suite, command=command)
    try:
        results = run_shards(shards, say=lambda line: typer.echo(line, err=True))
    except KeyboardInterrupt:
        typer.echo(
            "flashprobe: interrupted; the shard processes were stopped; rerun with --resume to "
            "continue their unfinished cells",
            err=True,
        )
        raise SystemExit(130) from None
    failed = [r for r in results if not r.ok]
    if failed:
        names = ", ".join(r.shard.name for r in failed)
        typer.echo(
            f"flashprobe: {len(failed)} of {len(results)} shard processes failed ({names}); "
            f"see {failed[0].shard.log}; the finished cells are kept (rerun to train the rest, "
            "with --resume for interrupted ones)",
            err=True,
        )
        raise SystemExit(1)


def _replay_line(replay: Any, root: Path) -> str:
    if replay.status in ("replayed", "cached"):
        return f"replay: {replay.message} -> {replay.suite_file}; ranking: flashprobe report {root}"
    return f"replay {replay.status}: {replay.message}"


def _point(planned: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in planned.cell.point) or "-"


def _plan_row(planned: Any) -> dict[str, Any]:
    cell = planned.cell
    action = planned.action
    if action == "resume" and planned.checkpoint_step is not None:
        action = f"resume from step {planned.checkpoint_step}"
    elif action == "extend" and planned.extends is not None:
        action = f"extend {planned.extends.path.name} from step {planned.checkpoint_step}"
    return {
        "variant": cell.variant,
        "point": _point(planned),
        "seed": cell.seed,
        "action": action,
        "branch": f"{cell.branch_from}@{cell.branch_step}" if cell.branch_from else None,
        "steps": planned.steps,
        "cell": planned.path.name,
    }


def _outcome_row(outcome: Any) -> dict[str, Any]:
    planned, summary = outcome.planned, outcome.summary or {}
    diverged = summary.get("diverged")
    return {
        "variant": planned.cell.variant,
        "point": _point(planned),
        "seed": planned.cell.seed,
        "status": outcome.status.replace("_", " "),
        "diverged": diverged,
        "step": summary.get("diverged_step") if diverged else summary.get("steps_done"),
        "final_loss": summary.get("final_loss"),
        "min_loss": summary.get("min_loss"),
        "final_val_loss": summary.get("final_val_loss"),
        "tokens_per_s": _rounded(summary.get("tokens_per_s")),
        "cell": planned.path.name,
    }


def _rounded(value: float | None) -> int | None:
    return None if value is None else round(value)
