"""Branching (the paper's replay of one baseline, §1): what a branched cell needs of its source.

The source variant must save a checkpoint at branch.step (train.checkpoint_every dividing it, or
its last step) and keep it (train.keep_checkpoints: null); every other variant at the same grid
point and seed then loads that checkpoint (weights, optimizer, divergence state) and continues on
the identical data order (the sampler is a pure function of seed and step). Model shape, seed,
batch size, optimizer and data must match. branch.step 0 starts from the seed's initial weights
(no checkpoint needed). The runner runs each source before the cells that branch from it
(runner.plan.run_order).
"""

from __future__ import annotations

from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.suites.cell_config import resolve_cell_config
from flashprobe.suites.suite import Suite
from flashprobe.train.config import LoopConfig


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
        if not saves_checkpoint_at(theirs.train, step):
            raise FlashprobeError(
                f"{where}: it saves no checkpoint at step {step} (set its "
                f"train.checkpoint_every to a divisor of {step})"
            )
        if theirs.train.keep_checkpoints is not None:
            raise FlashprobeError(
                f"{where}: it prunes checkpoints (train.keep_checkpoints: "
                f"{theirs.train.keep_checkpoints}); a branch source must keep them (null)"
            )


def saves_checkpoint_at(loop: LoopConfig, step: int) -> bool:
    """Whether a full run saves a checkpoint after `step` completed steps (arithmetic, not a
    list: a run's steps may be counted in billions)."""
    every = loop.checkpoint_every
    periodic = bool(every) and 1 <= step <= loop.steps and step % every == 0
    return periodic or (loop.checkpoint_final and step == loop.steps)


def _data_key(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "record_offsets"}
