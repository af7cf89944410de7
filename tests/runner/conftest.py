"""A tiny suite for runner tests: 2-layer GPT, emulator kernels, 8 steps, checkpoints every 4."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from flashprobe.suites.suite import deep_merge

TINY: dict[str, Any] = {
    "name": "tiny",
    "seeds": [0],
    "base": {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32,
                  "attention": {"impl": "flashprobe", "backend": "emulator"}},
        "data": {"max_bytes": 100_000},
        "optimizer": {"lr": 3e-3},
        "schedule": {"warmup_steps": 2, "min_lr": 1e-4},
        "train": {"steps": 8, "batch_size": 4, "device": "cpu", "checkpoint_every": 4},
        "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 4},
        "kernel": {"preset": "fa2", "block_n": 16},
    },
    "variants": {"fa2": {}, "sfa": {"kernel": {"preset": "sfa", "block_n": 16}}},
}  # fmt: skip


def tiny_suite(**changes: Any) -> dict[str, Any]:
    """TINY with top-level keys deep-merged in (e.g. branch=..., base={"train": {...}})."""
    return deep_merge(copy.deepcopy(TINY), changes)


@pytest.fixture
def make_suite() -> Callable[..., dict[str, Any]]:
    return tiny_suite
