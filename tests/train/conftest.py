"""Tiny CPU training configs (2 layers, 64 wide, sequence 32, a 300 kB stdlib corpus)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from flashprobe.train import TrainConfig


def tiny_config(**sections) -> TrainConfig:
    base = {
        "model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 32, "attention": "sdpa"},
        "data": {"max_bytes": 300_000},
        "optimizer": {"lr": 3e-3},
        "schedule": {"warmup_steps": 3, "min_lr": 1e-4},
        "train": {"steps": 12, "batch_size": 4, "micro_batch_size": 2, "precision": "bf16",
                  "device": "cpu"},
        "metrics": {"eval_every": 6, "eval_batches": 2, "spectral_every": 6,
                    "attention_stats_every": 6},
    }  # fmt: skip
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return TrainConfig.from_dict(base)


@pytest.fixture
def make_config() -> Callable[..., TrainConfig]:
    """`make_config(train={"steps": 20}, ...)`: the tiny config with some keys changed."""
    return tiny_config


@pytest.fixture(scope="module")
def make_config_module() -> Callable[..., TrainConfig]:
    """make_config for module-scoped fixtures."""
    return tiny_config
