"""`flashprobe ablate`: run an ablation suite into a result store, then print a summary table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from flashprobe.cli import app
from flashprobe.cli.path_args import folder_path
from flashprobe.reporting.render import check_format, render

if TYPE_CHECKING:  # imported lazily at run time: `flashprobe --version` stays fast
    from flashprobe.runner.replay_after_run import SuiteReplay

COLUMNS = [
    "variant",
    "point",
    "seed",
    "status",
    "diverged",
    "step",
    "final_loss",
    "min_loss",
    "loss_rise",
    "grad_runaway",
    "final_val_loss",
    "tokens_per_s",
    "cell",
]
HEADERS = {
    "final_loss": "final loss",
    "min_loss": "min loss",
    "loss_rise": "loss rise",
    "grad_runaway": "grad runaway",
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
    store: Path = typer.Option(
        Path("runs"), "--store", help="Result store folder.", parser=folder_path
    ),
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
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        metavar="N",
        help="Train in N processes side by side (each runs --shard k/N; logs in "
        "STORE/<suite>/logs/), then summarise and replay as usual: small models share one "
        "big GPU better. Default: the suite's jobs: (quick.yaml: 2), else 1.",
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
    from flashprobe.runner.suite_run import SuiteRequest, plan_run, run_suite

    check_format(fmt)
    request = SuiteRequest(
        config=config,
        overrides=tuple(overrides),
        variants=tuple(variants),
        store=store,
        resume=resume,
        restart=restart,
        replay=not no_replay,
        jobs=jobs,
        shard=shard,
    )
    if dry_run:
        from flashprobe.cli.ablate_plan import estimate_lines, render_plan

        planned = plan_run(request, dry_run=True)
        typer.echo(render_plan(fmt, planned))
        if fmt != "table":  # stdout stays one document: the estimate goes to stderr
            for line in estimate_lines(planned, problems=False):
                typer.echo(line, err=True)
        for problem in planned.problems if fmt != "table" else ():
            typer.echo(f"flashprobe: not checked here: {problem}", err=True)
        return

    from flashprobe.cli.ablate_progress import ProgressDisplay

    run = run_suite(
        request,
        events=ProgressDisplay(every=log_every),
        say=lambda line: typer.echo(line, err=True),
    )
    if run is None:  # a torchrun rank other than 0: rank 0 reports
        return
    typer.echo(render(fmt, run.rows(), document=run.to_dict(), columns=COLUMNS, headers=HEADERS))
    if fmt == "table":
        counts = {s: sum(o.status == s for o in run.outcomes) for s in ("done", "cached")}
        typer.echo(
            f"\n{len(run.outcomes)} cells ({counts['done']} run, {counts['cached']} cached) in "
            f"{run.folder}"
        )
        for o in run.outcomes:
            if o.message:
                typer.echo(f"- {o.planned.cell.name}: {o.status.replace('_', ' ')}: {o.message}")
    if run.replay is not None and fmt != "json":  # csv: stdout stays one table
        failed = run.replay.status == "failed"  # an error goes where errors go
        typer.echo(_replay_line(run.replay, run.store.root), err=fmt == "csv" or failed)
    if not run.ok:
        raise SystemExit(1)


def _replay_line(replay: SuiteReplay, root: Path) -> str:
    if replay.status in ("replayed", "cached"):
        return f"replay: {replay.message} -> {replay.suite_file}; ranking: flashprobe report {root}"
    return f"replay {replay.status}: {replay.message}"
