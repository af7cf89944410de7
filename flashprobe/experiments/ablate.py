"""`flashprobe ablate`: run every cell of an ablation suite into a result store.

Suite YAML schema (expansion: experiments.suite; cell config: experiments.cell_config):

    name: smoke                     # store folder STORE/<name>/ (default: the file's stem)
    description: ...                # free text
    seeds: [0, 1]                   # every variant × grid point runs once per seed
    base:                           # the run every variant starts from
      model:      {n_layer, n_head, n_kv_head, n_embd, block_size, vocab_size, bias, dropout,
                   attention: {impl: flashprobe|sdpa|math, backend: auto|emulator|triton},
                   layers: {1: {impl: ..., heads: {7: {...}}}}}      # 0-based layers/heads
      data:       {source: stdlib|bin, path, vocab_size, val_fraction, max_bytes, record_offsets}
      optimizer:  {name: adamw|muon, lr, betas, eps, weight_decay, muon_*}
      schedule:   {kind: cosine|constant, warmup_steps, decay_steps, min_lr}
      train:      {steps, batch_size, micro_batch_size, precision: bf16|fp32, grad_clip,
                   device: auto|cpu|cuda, allow_tf32, cpu_threads, checkpoint_every,
                   checkpoint_final, keep_checkpoints}
      divergence: {nonfinite, rise_factor, rise_margin, rise_window, spike_sigma, spike_window,
                   patience, min_step, stop}
      metrics:    {log_every, eval_every, eval_batches, spectral_every, attention_stats_every}
      kernel:     {preset: fa2|paper-code|sfa|paper-sfa|fp32, <KernelSpec field>: value, ...}
      capture:    {layers: [1], steps: [100], max_bytes: 256MiB}
    variants:                       # name → partial config deep-merged onto base
      fa2: {}
      sfa: {kernel: {preset: sfa}}
    axes:                           # dotted key → list of values; the grid is their product
      optimizer.lr: [1.0e-3, 2.0e-3]
    branch: {from: fa2, step: 20}   # other variants start from fa2's checkpoint at step 20
    replay:                         # optional: replay the variants on the captures afterwards
      baseline: fa2                 # keys and defaults: experiments.replay (baseline, safe,
      backend: auto                 # components, variants, sources, backend); false: no replay
    failure: {event: logit-runaway, logit_limit: 1000}   # optional: what the ranking counts as
                                    # a failed run (experiments.failure; default: divergence;
                                    # also layers, and horizon: the step outcomes are read at)
    throughput:                     # optional: measured speeds, for the estimates of --dry-run
      - {device: NVIDIA H200, jobs: 9, tokens_per_s: 95000}   # and `flashprobe suites`

Every unknown key or impossible value in any cell is rejected before anything runs or is
written. A cell = variant × grid point × seed; its key hashes its normalised config (and its
branch source's) with the code version (flashprobe version + git SHA), so changing either makes
new cells and finished cells are never rerun.

Branching (the paper's replay of one baseline, §1): the source variant must save a checkpoint at
branch.step (train.checkpoint_every dividing it, or its last step) and keep it
(train.keep_checkpoints: null); every other variant at the same grid point and seed then loads
that checkpoint (weights, optimizer, divergence state) and continues on the identical data order
(the sampler is a pure function of seed and step). Model shape, seed, batch size, optimizer and
data must match. branch.step 0 starts from the seed's initial weights (no checkpoint needed).
The runner runs each source before the cells that branch from it.

Interrupted cells (run/ holds metrics, no summary): --resume continues each from its newest
intact checkpoint that its logs reach intact (train.checkpoint.resume_point: a damaged newer
checkpoint or log line is named in the run's summary line and summary.json's resume_notes; from
scratch, or from the branch source, when none is left); --restart deletes its training output
and starts it over; with neither the suite is refused before anything runs. A cell is written
by one process at a time (experiments.cell_lock): one another process holds is planned "busy"
and left alone.
A new cell that is a finished cell run to a longer horizon (the same config but train.steps,
same code; a branched cell's from the same branch point) continues a copy of that run from its
final checkpoint (action "extend"; experiments.extension says when that equals a run from
scratch).
Under torchrun every rank runs the same plan; only rank 0 writes the store.

Shards (`--shard K/N`, and `--jobs N`, which starts N processes with shards 0/N..N-1/N on one
store: experiments.parallel): shard units are numbered in run order and shard K keeps the
units whose number is K modulo N. A unit is a (grid point, seed) group when the suite branches,
so a branched cell runs in the same process as its source, and a single cell when it does not,
so independent runs spread over every process. The N shards partition the cells. Processes
share a store safely: every cell has its own folder and every file is written atomically.

A run (not --dry-run) writes STORE/<suite>/suite.json first: the suite as run, i.e. the YAML
after --set (suite edits applied, run-config overrides folded into base and every variant, so
`flashprobe ablate -c STORE/<suite>/suite.json` plans the same cells); report and replay read
the roles from it. With a `replay:` section (checked with the rest of the suite), every finished
cell of the run is replayed once all cells ran (experiments.replay; rank 0 only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import re
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from flashprobe import __version__
from flashprobe.environment import environment, git_sha
from flashprobe.errors import FlashprobeError
from flashprobe.experiments.capture import CAPTURE_DIR, CaptureWriter
from flashprobe.experiments.cell_config import (
    CellSetup,
    check_runnable,
    normalise_cell_config,
    resolve_cell_config,
)
from flashprobe.experiments.cell_lock import CellBusy, cell_lock, lock_holder
from flashprobe.experiments.estimate import throughputs
from flashprobe.experiments.extension import Extension, ExtensionIndex, copy_run
from flashprobe.experiments.failure import FailureRule
from flashprobe.experiments.store import (
    RUN_DIR,
    SUITE_FILE,
    SUMMARY,
    ResultStore,
    read_json,
    write_json,
)
from flashprobe.experiments.suite import (
    Cell,
    Suite,
    apply_overrides,
    cell_key,
    load_suite,
    set_dotted,
)
from flashprobe.train.checkpoint import checkpoint_name, resume_point
from flashprobe.train.config import LoopConfig

#: busy: another process holds the cell's lock (experiments.cell_lock) as the suite is planned
Action = Literal["run", "skip", "resume", "restart", "extend", "busy"]
Status = Literal["done", "cached", "failed", "not_run"]


@dataclass(frozen=True)
class PlannedCell:
    """A cell, where it lives in the store and what the runner will do with it."""

    index: int  # position in the run order
    cell: Cell
    setup: CellSetup
    key: str
    path: Path
    action: Action
    source: int | None = None  # run-order index of the branch source
    checkpoint_step: int | None = None  # an interrupted or extended run's latest checkpoint
    extends: Extension | None = None  # the finished shorter run this cell continues
    holder: str | None = None  # action busy: who holds the cell's lock

    @property
    def run_dir(self) -> Path:
        return self.path / RUN_DIR

    @property
    def start_step(self) -> int:
        """The step the run itself starts at: its branch step, or 0."""
        return self.cell.branch_step or 0

    @property
    def first_step(self) -> int:
        """The step this invocation trains from (a resumed or extended run's checkpoint)."""
        if self.action in ("resume", "extend") and self.checkpoint_step is not None:
            return self.checkpoint_step
        return self.start_step

    @property
    def steps(self) -> int:
        return self.setup.train.train.steps


@dataclass(frozen=True)
class CellOutcome:
    planned: PlannedCell
    status: Status
    summary: Mapping[str, Any] | None = None
    message: str | None = None  # why a cell failed or did not run


class SuiteEvents:
    """Progress hooks (rank 0 only). The CLI's display subclasses this; tests inject faults."""

    def suite_started(self, plan: Sequence[PlannedCell]) -> None: ...

    def cell_started(self, planned: PlannedCell) -> None: ...

    def step(self, record: Mapping[str, Any]) -> None: ...

    def cell_finished(self, outcome: CellOutcome) -> None: ...


# -- loading and checking -----------------------------------------------------------------------
def prepare_suite(
    path: str | Path, overrides: Iterable[str] = (), *, check_machine: bool = True
) -> Suite:
    """Load, expand and validate a suite (every cell, then the branches); nothing is written.

    check_machine=False (a dry run) leaves out what only the target machine can check (a CUDA
    GPU, the data folder): `machine_problems` then lists it."""
    validate = normalise_cell_config if check_machine else _normalise_anywhere
    suite = load_suite(path, overrides, validate=validate)
    check_branches(suite)
    replay_settings(suite, check_machine=check_machine)
    FailureRule.from_suite(suite.raw.get("failure"))
    throughputs(suite)
    return suite


def _normalise_anywhere(config: Mapping[str, Any]) -> dict[str, Any]:
    return resolve_cell_config(config).to_dict()


def machine_problems(suite: Suite) -> list[str]:
    """What would stop this suite on this machine (no CUDA GPU, a missing data folder), one
    line per problem naming its variants; empty when it can run here."""
    found: dict[str, list[str]] = {}
    for cell in suite.cells:
        train = resolve_cell_config(cell.config).train
        for cuda in (None, True):  # as this machine is, then as if it had a GPU (the data)
            try:
                check_runnable(train, cuda=cuda)
            except FlashprobeError as exc:
                found.setdefault(str(exc), []).append(cell.variant)
    try:
        replay_settings(suite)
    except FlashprobeError as exc:
        found.setdefault(f"replay: {exc}", [])
    lines = []
    for problem, variants in found.items():
        names = list(dict.fromkeys(variants))
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"{problem} ({shown})" if names else problem)
    return lines


def replay_settings(suite: Suite, *, check_machine: bool = True) -> Any:
    """The suite's `replay:` section as experiments.replay.ReplaySettings (None: no section, or
    `replay: false`); names that are no variant and (with check_machine) a triton backend
    without CUDA are refused."""
    if "replay" not in suite.raw or suite.raw["replay"] is False:
        return None
    from flashprobe.experiments.replay import ReplaySettings, choose_backend

    settings = ReplaySettings.from_suite(suite.raw["replay"])
    known = suite.variants()
    named = [("replay.baseline", settings.baseline), ("replay.safe", settings.safe)]
    named += [("replay.components", v) for v in settings.components]
    named += [("replay.variants", v) for v in settings.variants or ()]
    for where, name in named:
        if name is not None and name not in known:
            raise FlashprobeError(f"{where}: no variant {name!r}; known: {', '.join(known)}")
    if check_machine:
        choose_backend(settings.backend)
    return settings


def select_variants(suite: Suite, names: Sequence[str]) -> Suite:
    """Only these variants' cells (plus their branch source, which they start from)."""
    if not names:
        return suite
    known = suite.variants()
    for name in names:
        if name not in known:
            raise FlashprobeError(
                f"--variant {name!r} is not in the suite; known: {', '.join(known)}"
            )
    keep = set(names) | {c.branch_from for c in suite.cells if c.variant in names and c.branch_from}
    return dataclasses.replace(suite, cells=tuple(c for c in suite.cells if c.variant in keep))


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard K/N` as (K, N), 0 <= K < N."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip(), flags=re.ASCII)
    if match is None:
        raise FlashprobeError(f"--shard must be K/N, e.g. 0/3 (shard 0 of 3), got {text!r}")
    index, count = int(match[1]), int(match[2])
    check_shard(index, count)
    return index, count


def check_shard(index: int, count: int) -> None:
    if count < 1:
        raise FlashprobeError(f"--shard {index}/{count}: N must be at least 1")
    if not 0 <= index < count:
        raise FlashprobeError(
            f"--shard {index}/{count}: K must be below N (0-based: 0..{count - 1})"
        )


def shard_numbers(cells: Sequence[Cell]) -> dict[str, int]:
    """Cell name → the number of its shard unit, units counted in run order from 0. A unit runs
    whole in one shard: the (grid point, seed) group when the suite branches (a branched cell
    starts from its source's checkpoint), else the cell alone."""
    ordered = run_order(cells)
    branched = any(c.branch_from for c in ordered)
    units: dict[Any, int] = {}
    return {
        c.name: units.setdefault(c.group if branched else (c.variant, c.group), len(units))
        for c in ordered
    }


def shard_of(cell: Cell, numbers: Mapping[str, int], count: int) -> int:
    """The shard (of `count`) that runs this cell: its unit's number modulo count."""
    return numbers[cell.name] % count


def select_shard(suite: Suite, index: int, count: int) -> Suite:
    """Shard `index` of `count`: the cells of units index, index + count, index + 2·count, ...
    (`shard_numbers`). A branched cell is in its source's unit, so both run in the same shard;
    the shards of one count partition the suite."""
    check_shard(index, count)
    numbers = shard_numbers(suite.cells)
    cells = tuple(c for c in suite.cells if shard_of(c, numbers, count) == index)
    return dataclasses.replace(suite, cells=cells)


def check_branches(suite: Suite) -> None:
    """A branched cell needs a source checkpoint at branch.step that fits its model."""
    for cell in suite.cells:
        if cell.branch_from is None or cell.source_config is None:
            continue
        step = cell.branch_step or 0
        mine = resolve_cell_config(cell.config).train
        theirs = resolve_cell_config(cell.source_config).train
        where = f"variant {cell.variant!r} cannot branch from {cell.branch_from!r}"
        if step >= mine.train.steps:
            raise FlashprobeError(
                f"{where}: branch.step ({step}) must be below its train.steps ({mine.train.steps})"
            )
        pairs = {
            "model.n_layer": (mine.model.n_layer, theirs.model.n_layer),
            "model.n_head": (mine.model.n_head, theirs.model.n_head),
            "model.n_kv_head": (mine.model.kv_heads, theirs.model.kv_heads),
            "model.n_embd": (mine.model.n_embd, theirs.model.n_embd),
            "model.block_size": (mine.model.block_size, theirs.model.block_size),
            "model.vocab_size": (mine.model.vocab_size, theirs.model.vocab_size),
            "model.bias": (mine.model.bias, theirs.model.bias),
            "train.batch_size": (mine.train.batch_size, theirs.train.batch_size),
            "optimizer.name": (mine.optimizer.name, theirs.optimizer.name),
            "data": (_data_key(mine.data.to_dict()), _data_key(theirs.data.to_dict())),
        }
        for name, (a, b) in pairs.items():
            if a != b:
                raise FlashprobeError(f"{where}: {name} differs ({a!r} vs {b!r})")
        if step == 0:
            continue
        if step > theirs.train.steps:
            raise FlashprobeError(
                f"{where}: branch.step ({step}) is beyond its train.steps ({theirs.train.steps})"
            )
        if step not in saved_checkpoint_steps(theirs.train):
            raise FlashprobeError(
                f"{where}: it saves no checkpoint at step {step} (set its "
                f"train.checkpoint_every to a divisor of {step})"
            )
        if theirs.train.keep_checkpoints is not None:
            raise FlashprobeError(
                f"{where}: it prunes checkpoints (train.keep_checkpoints: "
                f"{theirs.train.keep_checkpoints}); a branch source must keep them (null)"
            )


def saved_checkpoint_steps(loop: LoopConfig) -> list[int]:
    """Steps (completed) at which a full run saves checkpoints."""
    every = loop.checkpoint_every
    steps = list(range(every, loop.steps + 1, every)) if every else []
    if loop.checkpoint_final and loop.steps not in steps:
        steps.append(loop.steps)
    return steps


def _data_key(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "record_offsets"}


# -- the suite as run ----------------------------------------------------------------------------
def suite_definition(suite: Suite, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """The raw suite after --set, named: suite edits are already in suite.raw; run-config
    overrides (applied to every cell after its variant) are set in base and in every variant,
    which expands to the same cells."""
    raw, run = apply_overrides(suite.raw, overrides)
    raw = {"name": suite.name, **raw}  # the name may have come from the YAML file's stem
    if not run:
        return raw
    variants = raw.get("variants")
    if not isinstance(variants, Mapping) or not variants:
        variants = {"baseline": {}}
    base = dict(raw.get("base") or {})
    deltas = {str(k): dict(v) if isinstance(v, Mapping) else {} for k, v in variants.items()}
    for key, value in run.items():
        set_dotted(base, key, value)
        for delta in deltas.values():
            set_dotted(delta, key, value)
    return {**raw, "base": base, "variants": deltas}


def write_suite_definition(store: ResultStore, suite: Suite, overrides: Iterable[str] = ()) -> Path:
    """STORE/<suite>/suite.json (atomic): the suite as this run expanded it."""
    store.check_writable()
    path = store.root / suite.name / SUITE_FILE
    store.check_inside(path)
    if path.parent.exists() and not path.parent.is_dir():
        raise FlashprobeError(f"{path.parent} is not a folder (suite {suite.name} goes there)")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, suite_definition(suite, overrides))
    return path


# -- planning -----------------------------------------------------------------------------------
def code_version() -> str:
    """flashprobe's version plus the git SHA of its checkout, when there is one."""
    sha = git_sha()
    return f"{__version__}+g{sha[:12]}" if sha else __version__


def run_order(cells: Sequence[Cell]) -> list[Cell]:
    """Suite order, except that with a branch each (grid point, seed) group runs its source
    first, then the cells branching from it."""
    if not any(c.branch_from for c in cells):
        return list(cells)
    groups: dict[Any, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.group, []).append(cell)
    ordered: list[Cell] = []
    for members in groups.values():
        ordered += [c for c in members if c.branch_from is None]
        ordered += [c for c in members if c.branch_from is not None]
    return ordered


def plan_suite(
    suite: Suite,
    store: ResultStore,
    *,
    version: str,
    resume: bool = False,
    restart: bool = False,
) -> list[PlannedCell]:
    """What to do with each cell; refuses interrupted cells unless resume or restart."""
    if resume and restart:
        raise FlashprobeError("choose one of --resume and --restart")
    store.check_root()
    plan: list[PlannedCell] = []
    index_of: dict[tuple[str, Any], int] = {}
    interrupted: list[PlannedCell] = []
    shorter_runs = ExtensionIndex(store, suite.name, version)
    for index, cell in enumerate(run_order(suite.cells)):
        path = store.cell_dir(cell, version)
        action: Action = "run"
        checkpoint_step, extends, holder = None, None, None
        if store.is_finished(cell, version):
            action = "skip"
        elif (holder := lock_holder(path)) is not None:
            action = "busy"  # live in another process: neither interrupted nor to be run here
        elif store.is_interrupted(cell, version):
            point = resume_point(path / RUN_DIR)
            checkpoint_step = point.step if point.checkpoint is not None else None
            action = "resume" if resume else "restart"
        elif (extends := shorter_runs.find(cell)) is not None:
            action, checkpoint_step = "extend", extends.checkpoint_step
        planned = PlannedCell(
            index=index,
            cell=cell,
            setup=resolve_cell_config(cell.config),
            key=cell_key(cell, version),
            path=path,
            action=action,
            source=index_of.get((cell.branch_from, cell.group)) if cell.branch_from else None,
            checkpoint_step=checkpoint_step,
            extends=extends,
            holder=holder,
        )
        if action in ("resume", "restart") and not (resume or restart):
            interrupted.append(planned)
        index_of[cell.variant, cell.group] = index
        plan.append(planned)
    if interrupted:
        first = interrupted[0]
        more = f" (and {len(interrupted) - 1} more)" if len(interrupted) > 1 else ""
        last = (
            f"last checkpoint: step {first.checkpoint_step}"
            if first.checkpoint_step is not None
            else "no checkpoint yet"
        )
        raise FlashprobeError(
            f"cell {first.cell.name} was interrupted{more} ({last}; {first.path}); rerun with "
            "--resume to continue it or --restart to start it over"
        )
    return plan


# -- running ------------------------------------------------------------------------------------
def plan_device(plan: Sequence[PlannedCell]) -> str:
    """The one train.device of the cells to run (torchrun ranks must agree on it)."""
    devices = {p.setup.train.train.device for p in plan if p.action != "skip"}
    if len(devices) > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise FlashprobeError(f"under torchrun every cell needs the same train.device: {devices}")
    return next(iter(devices), "auto")


@contextlib.contextmanager
def suite_session(plan: Sequence[PlannedCell]) -> Iterator[None]:
    """The process group for a whole command: training, then rank 0's replay and report.

    Under torchrun every rank stays until rank 0 is done (a rank that exits while another
    still works can abort in gloo's teardown); run_plan inside reuses this group.
    """
    from flashprobe.train.distributed import setup_distributed

    dist = setup_distributed(plan_device(plan))
    try:
        yield
    finally:
        dist.close()


def run_plan(
    plan: Sequence[PlannedCell],
    store: ResultStore,
    *,
    version: str,
    events: SuiteEvents | None = None,
) -> list[CellOutcome]:
    """Run the planned cells in order; returns one outcome per cell.

    A cell that raises is recorded as failed and the suite goes on (its branches do not run);
    it stays unfinished in the store, so the next invocation retries it. KeyboardInterrupt and
    any failure under torchrun (where one rank cannot go on alone) propagate.
    """
    from flashprobe.train.distributed import setup_distributed

    dist = setup_distributed(plan_device(plan))
    events = events if events is not None and dist.is_main else SuiteEvents()
    try:
        env = environment(str(dist.device), dist.world_size) if dist.is_main else {}
        events.suite_started(plan)
        outcomes: list[CellOutcome] = []
        for planned in plan:
            outcome = _run_cell(planned, outcomes, store, version, env, dist, events)
            outcomes.append(outcome)
            events.cell_finished(outcome)
        return outcomes
    finally:
        dist.close()


def _run_cell(
    planned: PlannedCell,
    outcomes: Sequence[CellOutcome],
    store: ResultStore,
    version: str,
    env: Mapping[str, Any],
    dist: Any,
    events: SuiteEvents,
) -> CellOutcome:
    cell = planned.cell
    if planned.action == "skip":
        return CellOutcome(planned, "cached", read_json(planned.path / SUMMARY))
    start_from, source = None, None
    if cell.branch_from is not None and planned.source is not None:
        source = outcomes[planned.source]
        if planned.extends is not None:  # resumes from its own checkpoint; needs its source run
            if source.status not in ("done", "cached"):
                return CellOutcome(planned, "not_run", message=_unreachable(source, cell))
        elif cell.branch_step:
            start_from = source.planned.run_dir / "checkpoints" / checkpoint_name(cell.branch_step)
            if not (start_from / "state.json").is_file():
                return CellOutcome(planned, "not_run", message=_unreachable(source, cell))
    with _single_writer(planned, dist) as refused:
        if refused is not None:
            return refused
        return _train_cell(planned, source, start_from, store, version, env, dist, events)


@contextlib.contextmanager
def _single_writer(planned: PlannedCell, dist: Any) -> Iterator[CellOutcome | None]:
    """Hold the cell's lock (rank 0) while the block trains it; yields the outcome instead when
    it must not train here: another process holds the lock, or the cell changed since it was
    planned (finished meanwhile: cached; started and stopped by another process: not run)."""
    with contextlib.ExitStack() as held:
        refused = None
        if dist.is_main:
            try:
                held.enter_context(cell_lock(planned.path))
            except CellBusy as exc:
                refused = CellOutcome(planned, "not_run", message=f"busy: {exc}")
            else:
                refused = _changed_since_planned(planned)
        if dist.world_size > 1:  # every rank must skip the cell, or none
            import torch

            flag = torch.tensor(float(refused is not None), device=dist.device)
            if float(dist.mean(flag)) > 0 and refused is None:  # as rank 0 decided
                finished = (planned.path / SUMMARY).is_file()
                refused = (
                    CellOutcome(planned, "cached", read_json(planned.path / SUMMARY))
                    if finished
                    else CellOutcome(planned, "not_run", message="refused on rank 0")
                )
        yield refused


def _changed_since_planned(planned: PlannedCell) -> CellOutcome | None:
    if (planned.path / SUMMARY).is_file():
        return CellOutcome(planned, "cached", read_json(planned.path / SUMMARY))
    if planned.action == "busy":
        return CellOutcome(
            planned,
            "not_run",
            message=f"another process was writing it as this run started ({planned.holder}) "
            "and stopped before it finished; rerun (with --resume to continue it)",
        )
    if planned.action == "run" and (planned.run_dir / "metrics.jsonl").is_file():
        return CellOutcome(
            planned,
            "not_run",
            message="another process started it meanwhile and stopped; rerun with --resume "
            "or --restart",
        )
    return None


def _train_cell(
    planned: PlannedCell,
    source: CellOutcome | None,
    start_from: Path | None,
    store: ResultStore,
    version: str,
    env: Mapping[str, Any],
    dist: Any,
    events: SuiteEvents,
) -> CellOutcome:
    from flashprobe.train.run import train_run

    cell = planned.cell
    events.cell_started(planned)
    extends = planned.extends  # planned only when its checkpoint exists: always a resume
    # The newest intact checkpoint (read now, under the lock): none left starts the run over
    point = resume_point(planned.run_dir) if planned.action == "resume" else None
    resume = extends is not None or (point is not None and point.checkpoint is not None)
    resumed_from = point.step if point is not None else planned.checkpoint_step
    if dist.is_main:
        extra = {
            "source_key": source.planned.key if source else None,
            "source_cell": source.planned.path.name if source else None,
            "source_checkpoint": _relative(start_from, store.root),
            "extended_from": extends.key if extends else None,
        }
        store.open_cell(cell, version, env, extra)
        if planned.action in ("restart", "extend") or (planned.action == "resume" and not resume):
            store.reset(planned.path)  # extend: a run/ left by a copy that was cut off
        if extends is not None:
            copy_run(extends.path / RUN_DIR, planned.run_dir)
    dist.barrier()
    writer = (
        CaptureWriter(
            planned.run_dir / CAPTURE_DIR,
            planned.setup.capture,
            planned.setup.train,
            start_step=planned.start_step,
        )
        if planned.setup.capture.enabled
        else None
    )
    meter = _StepMeter(events)
    try:
        result = train_run(
            planned.setup.train,
            planned.run_dir,
            resume=resume,
            start_from=None if resume else start_from,
            progress=meter,
            capture=writer,
        )
    except Exception as exc:
        if dist.world_size > 1:
            raise
        last = traceback.format_exception_only(exc)[-1].strip().splitlines()[0]
        return CellOutcome(planned, "failed", message=last)
    summary = {
        "status": "done",
        **{k: v for k, v in result.to_dict().items() if k != "out_dir"},
        # train_run's figure also counts time restored from a branch source's checkpoint
        "tokens_per_s": meter.tokens_per_s() if meter.steps else result.tokens_per_s,
        "steps_trained": meter.steps,
        "run_dir": RUN_DIR,
        "suite": cell.suite,
        "variant": cell.variant,
        "point": [list(p) for p in cell.point],
        "seed": cell.seed,
        "key": planned.key,
        "code_version": version,
        "branch_from": cell.branch_from,
        "branch_step": cell.branch_step,
        "source_key": source.planned.key if source else None,
        "resumed_from_step": resumed_from if resume else None,
        "resume_notes": list(point.notes) if point is not None else [],
        "extended_from": extends.key if extends else None,
        "environment": dict(env),
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if dist.is_main:
        store.finish(planned.path, summary)
    dist.barrier()
    # Said in the run's summary lines: a damaged checkpoint or log line cost recomputed steps
    return CellOutcome(planned, "done", summary, message=point.describe() if point else None)


class _StepMeter:
    """Forwards step records to the events and measures this cell's own throughput."""

    def __init__(self, events: SuiteEvents) -> None:
        self.events, self.steps, self.seconds_per_token = events, 0, 0.0

    def __call__(self, record: Mapping[str, Any]) -> None:
        rate = record.get("tokens_per_s")
        if rate:
            self.steps += 1
            self.seconds_per_token += 1.0 / rate
        self.events.step(record)

    def tokens_per_s(self) -> float:
        """Steps × tokens over their summed time (equal tokens per step: harmonic mean)."""
        return self.steps / self.seconds_per_token if self.seconds_per_token else 0.0


def _unreachable(source: CellOutcome, cell: Cell) -> str:
    name = source.planned.cell.name
    summary = source.summary or {}
    if source.status in ("failed", "not_run"):
        return f"branch source {name} {source.status.replace('_', ' ')}"
    if summary.get("diverged") and (summary.get("steps_done") or 0) < (cell.branch_step or 0):
        return (
            f"branch source {name} diverged at step {summary.get('diverged_step')} before the "
            f"branch step {cell.branch_step}"
        )
    return f"branch source {name} has no checkpoint at step {cell.branch_step}"


def _relative(path: Path | None, root: Path) -> str | None:
    if path is None:
        return None
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# -- replay after the run -------------------------------------------------------------------------
@dataclass(frozen=True)
class SuiteReplay:
    """What the post-run replay did: status replayed / cached / skipped / failed."""

    status: str
    message: str
    suite_file: str | None = None
    cells: tuple[Mapping[str, Any], ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "file": self.suite_file,
            "cells": [dict(c) for c in self.cells],
            "notes": list(self.notes),
        }


def replay_finished(
    store: ResultStore,
    suite: Suite,
    outcomes: Sequence[CellOutcome],
    *,
    settings: Any = None,
    progress: Any = None,
) -> SuiteReplay:
    """Replay the cells this run finished (done or cached) with the suite's replay settings.

    Failed or not-run cells are left out; variants with no finished cell are dropped from
    replay.variants, and a run whose baseline finished no cell replays nothing ("skipped").
    A replay error is returned as "failed" (the store keeps every training result).
    """
    from flashprobe.experiments import store_reader as sr
    from flashprobe.experiments.replay import replay_cells

    settings = settings if settings is not None else replay_settings(suite)
    if settings is None:
        return SuiteReplay("skipped", "the suite has no replay: section")
    finished = {o.planned.path.resolve() for o in outcomes if o.status in ("done", "cached")}
    if not finished:
        return SuiteReplay("skipped", "no cell finished")
    try:
        cells = [c for c in sr.read_cells(store.root, suite.name) if c.path.resolve() in finished]
    except FlashprobeError as exc:
        return SuiteReplay("failed", str(exc))
    present = list(dict.fromkeys(c.variant for c in cells))
    baseline = settings.baseline
    if baseline is None:
        branch = {c.branch_from for c in suite.cells if c.branch_from}
        baseline = next(iter(branch)) if len(branch) == 1 else None
    if baseline is not None and baseline not in present:
        return SuiteReplay("skipped", f"the baseline {baseline} finished no cell")
    changes: dict[str, Any] = {}
    if settings.safe is not None and settings.safe not in present:
        changes["safe"] = None
    if settings.variants is not None:
        changes["variants"] = tuple(v for v in settings.variants if v in present)
    if changes:
        settings = dataclasses.replace(settings, **changes)
    try:
        outcome = replay_cells(cells, settings, progress=progress)
    except FlashprobeError as exc:
        return SuiteReplay("failed", str(exc))
    except Exception as exc:  # the training results stand; say what broke in one line
        return SuiteReplay("failed", traceback.format_exception_only(exc)[-1].strip())
    statuses = [c["status"] for c in outcome.cells]
    counts = {s: statuses.count(s) for s in dict.fromkeys(statuses)}
    done = [s for s in ("replayed", "cached") if counts.get(s)]
    said = ", ".join(f"{counts[s]} {s}" for s in counts) or "none"
    status = "replayed" if "replayed" in done else ("cached" if done else "skipped")
    wanted = settings.variants if settings.variants is not None else present
    return SuiteReplay(
        status,
        f"{len(wanted)} variants on the captures of {len(outcome.cells)} "
        f"{outcome.roles.baseline if settings.sources == 'baseline' else 'source'} cells ({said})",
        outcome.suite_file,
        tuple(outcome.cells),
        tuple(outcome.notes),
    )
