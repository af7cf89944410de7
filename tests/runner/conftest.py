"""A tiny suite for runner tests: 2-layer GPT, emulator kernels, 8 steps, checkpoints every 4."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from tiny_suite import tiny_suite

from flashprobe.suites.suite import deep_merge

TINY: dict[str, Any] = tiny_suite(
    {
        "base": {
            "optimizer": {"lr": 3e-3},
            "train": {"steps": 8, "checkpoint_every": 4},
            "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 4},
            "kernel": {"preset": "fa2", "block_n": 16},
        },
        "variants": {"fa2": {}, "sfa": {"kernel": {"preset": "sfa", "block_n": 16}}},
    }
)


def tiny_suite(**changes: Any) -> dict[str, Any]:
    """TINY with top-level keys deep-merged in (e.g. branch=..., base={"train": {...}})."""
    return deep_merge(copy.deepcopy(TINY), changes)


@pytest.fixture
def make_suite() -> Callable[..., dict[str, Any]]:
    return tiny_suite
