"""Load a suite and check all of it before anything runs: `flashprobe ablate`'s first step.

Suite YAML schema (expansion: suites.suite; cell config: suites.cell_config):

    inherit: other.yaml             # optional: start from that suite (a path relative to this
                                    # file): base merges key by key, other keys replace it
    name: smoke                     # store folder STORE/<name>/ (default: the file's stem)
    description: ...                # free text
    seeds: [0, 1]                   # every variant × grid point runs once per seed (train.seed)
    base:                           # the run every variant starts from
      model:      {n_layer, n_head, n_kv_head, n_embd, block_size, vocab_size, bias, dropout,
                   attention: {impl: flashprobe|sdpa|math, spec, backend: auto|emulator|triton},
                   layers: {1: {impl, spec, backend, heads: {7: {...}}}}}  # 0-based layers/heads
      data:       {source: stdlib|pysource|bin, path, vocab_size, val_fraction, max_bytes,
                   cache_dir, record_offsets}
      optimizer:  {name: adamw|muon|sgd, lr, betas, eps, weight_decay, muon_*}
      schedule:   {kind: cosine|constant, warmup_steps, decay_steps, min_lr}
      train:      {steps, batch_size, micro_batch_size, precision: bf16|fp32, grad_clip,
                   device: auto|cpu|cuda, allow_tf32, deterministic, cpu_threads,
                   compile, compile_mode: default|reduce-overhead|max-autotune-no-cudagraphs,
                   checkpoint_every, checkpoint_final, keep_checkpoints}
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
      baseline: fa2                 # keys and defaults: attribution.replay (baseline, safe,
      backend: auto                 # components, variants, sources, backend); false: no replay
    failure: {event: logit-runaway, logit_limit: 1000}   # optional: what the ranking counts as
                                    # a failed run (attribution.failure; default: divergence;
                                    # gradient-runaway: a divergence or the gradient at 100×;
                                    # also layers, and horizon: the step outcomes are read at)
    throughput:                     # optional: measured speeds, for the estimates of --dry-run
      - {device: NVIDIA H200, jobs: 9, tokens_per_s: 95000}   # and `flashprobe suites`
    jobs: 2                         # optional: processes side by side when ablate has no
                                    # --jobs (default 1; not passed on by inherit:)

Every unknown key or impossible value in any cell is rejected before anything runs or is
written (`prepare_suite`); a dry run leaves out what only the target machine can check and
lists it (`machine_problems`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path

from flashprobe.attribution.failure import FailureRule
from flashprobe.attribution.replay_settings import ReplaySettings
from flashprobe.backends import machine_backend
from flashprobe.errors import FlashprobeError
from flashprobe.runner.branches import check_branches
from flashprobe.suites.cell_config import (
    check_runnable,
    normalise_cell_config,
    resolve_cell_config,
)
from flashprobe.suites.estimate import throughputs
from flashprobe.suites.suite import Suite, load_suite, variant_names

#: how a replay: section's triton backend on a machine without CUDA should be answered
REPLAY_ON_CPU = "--set replay.backend=emulator, or --no-replay"


def prepare_suite(
    path: str | Path,
    overrides: Iterable[str] = (),
    *,
    check_machine: bool = True,
    variants: Sequence[str] = (),
) -> Suite:
    """Load, expand and validate a suite (every cell, then the branches); nothing is written.

    check_machine=False (a dry run) leaves out what only the target machine can check (a CUDA
    GPU, the data folder): `machine_problems` then lists it. With `variants` (--variant), a name
    not in the suite is refused first, and the machine is checked for their cells only (and
    their branch sources): a CPU variant of a suite that also has GPU ones runs here. The
    replay's backend is checked by plan_run, only when the replay runs (not --no-replay)."""
    suite = load_suite(path, overrides, validate=normalise_cell_config)
    check_branches(suite)
    selected = select_variants(suite, variants)
    if check_machine:
        for cell in selected.cells:
            try:
                check_runnable(resolve_cell_config(cell.config).train)
            except FlashprobeError as exc:
                raise FlashprobeError(f"variant {cell.variant!r}: {exc}") from None
    replay_settings(suite, check_machine=False)  # its backend: plan_run, unless --no-replay
    rule = FailureRule.from_suite(suite.raw.get("failure"))
    for cell in suite.cells:
        rule.check_layers(resolve_cell_config(cell.config).train.model.n_layer)
    throughputs(suite)
    return suite


def machine_problems(suite: Suite, replay_from: Suite | None = None) -> list[str]:
    """What would stop this suite on this machine (no CUDA GPU, a missing data folder, and with
    `replay_from`, the whole suite whose replay: section runs after training, its backend), one
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
        if replay_from is not None:  # the whole suite: --variant narrows what trains, not this
            replay_settings(replay_from)
    except FlashprobeError as exc:
        found.setdefault(f"replay: {exc}", [])
    return [f"{p} ({variant_names(vs)})" if vs else p for p, vs in found.items()]


def replay_settings(suite: Suite, *, check_machine: bool = True) -> ReplaySettings | None:
    """The suite's `replay:` section as ReplaySettings (attribution.replay_settings; None: no
    section, or `replay: false`); names that are no variant and (with check_machine) a triton
    backend without CUDA are refused."""
    if "replay" not in suite.raw or suite.raw["replay"] is False:
        return None
    settings = ReplaySettings.from_suite(suite.raw["replay"])
    known = suite.variants()
    named = [("replay.baseline", settings.baseline), ("replay.safe", settings.safe)]
    named += [("replay.components", v) for v in settings.components]
    named += [("replay.variants", v) for v in settings.variants or ()]
    for where, name in named:
        if name is not None and name not in known:
            raise FlashprobeError(f"{where}: no variant {name!r}; known: {', '.join(known)}")
    if check_machine:
        machine_backend(settings.backend, instead=REPLAY_ON_CPU)
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
