"""Branch checks: a branched cell needs its source's checkpoint, model and data."""

from __future__ import annotations

import pytest
from runner_helpers import suite_of

from flashprobe.errors import FlashprobeError


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
