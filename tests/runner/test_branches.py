"""Branch checks: a branched cell needs its source's checkpoint, model and data."""

from __future__ import annotations

import pytest
from runner_helpers import suite_of

from flashprobe.errors import FlashprobeError
from flashprobe.runner.branches import saves_checkpoint_at
from flashprobe.train.config import LoopConfig


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"branch": {"from": "fa2", "step": 3}}, "no checkpoint at step 3"),
        ({"branch": {"from": "fa2", "step": 8}}, r"branch.step \(8\) must be below"),
        (
            {
                "branch": {"from": "fa2", "step": 4},
                "variants": {"fa2": {"train": {"keep_checkpoints": 1}}},
            },
            "a branch source must keep them",
        ),
        (
            {"branch": {"from": "fa2", "step": 4}, "variants": {"sfa": {"model": {"n_embd": 64}}}},
            "model.n_embd differs",
        ),
    ],
)
def test_impossible_branches_are_refused(change, needle: str, make_suite) -> None:
    with pytest.raises(FlashprobeError, match=needle):
        suite_of(make_suite(**change))


def test_checkpoint_steps_are_arithmetic_at_any_length() -> None:
    """A run of 10^20 steps is planned at once: no list of its checkpoint steps is built (it
    raised OverflowError, and 10^9 steps took a minute and 4 GB)."""
    loop = LoopConfig(steps=10**20, checkpoint_every=500)
    assert saves_checkpoint_at(loop, 500) and saves_checkpoint_at(loop, 10**20)
    assert not saves_checkpoint_at(loop, 501) and not saves_checkpoint_at(loop, 0)
    assert not saves_checkpoint_at(loop, 10**20 + 500)
    final_only = LoopConfig(steps=7, checkpoint_every=0)
    assert saves_checkpoint_at(final_only, 7) and not saves_checkpoint_at(final_only, 6)
    assert not saves_checkpoint_at(LoopConfig(steps=7, checkpoint_final=False), 7)
