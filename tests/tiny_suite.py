"""The tiny CPU suite that the CLI, runner and digest tests train: two layers of two heads, 32
wide, 32 tokens, on the emulator; each test module deep-merges what it needs on top."""

from __future__ import annotations

import copy
from typing import Any

from flashprobe.suites.suite import deep_merge

TINY_BASE: dict[str, Any] = {
    "name": "tiny",
    "seeds": [0],
    "base": {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32,
                  "attention": {"impl": "flashprobe", "backend": "emulator"}},
        "data": {"max_bytes": 100_000},
        "schedule": {"warmup_steps": 2, "min_lr": 1e-4},
        "train": {"batch_size": 4, "device": "cpu"},
    },
}  # fmt: skip


def tiny_suite(changes: dict[str, Any]) -> dict[str, Any]:
    """A fresh copy of TINY_BASE with `changes` deep-merged in (keys of mappings merge)."""
    return deep_merge(copy.deepcopy(TINY_BASE), copy.deepcopy(changes))
