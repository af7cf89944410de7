"""TrainConfig.from_dict: unknown keys and bad values give one line naming the key."""

from __future__ import annotations

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.train import LoopConfig, TrainConfig


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"optimiser": {}}, "unknown config section 'optimiser'"),
        ({"optimizer": {"learning_rate": 1}}, "unknown key optimizer.learning_rate"),
        ({"optimizer": {"lr": "fast"}}, "optimizer.lr must be a number, got 'fast'"),
        ({"optimizer": {"lr": -1}}, "optimizer.lr must be > 0"),
        ({"optimizer": {"betas": [0.9]}}, "optimizer.betas must have 2 entries"),
        ({"optimizer": {"name": "lion"}}, "optimizer.name must be one of adamw, muon, sgd"),
        ({"schedule": {"warmup_steps": 1.5}}, "schedule.warmup_steps must be an integer"),
        ({"train": {"precision": "fp16"}}, "train.precision must be one of bf16, fp32"),
        ({"train": {"steps": 0}}, "train.steps must be >= 1"),
        ({"divergence": {"rise_factor": 0.5}}, "divergence.rise_factor must be > 1"),
        ({"divergence": {"spike_sigma": True}}, "divergence.spike_sigma must be a number"),
        (
            {"metrics": {"capture_layers": [7]}},
            r"capture.layers \(metrics.capture_layers\): layer 7 out of range",
        ),
        ({"metrics": {"eval_every": None}}, "metrics.eval_every must be an integer"),
        ({"model": {"n_head": 0}}, "model.n_head must be >= 1"),
        ({"data": {"source": "owt"}}, "data.source must be one of"),
        ({"schedule": {"min_lr": 1.0}}, "schedule.min_lr .* must be <= optimizer.lr"),
        ({"train": []}, "train must be a mapping"),
        ({"train": {"compile": "yes"}}, "train.compile must be"),
        ({"train": {"compile_mode": "fast"}}, "train.compile_mode must be one of default, reduce"),
    ],
)
def test_errors_name_the_key_in_one_line(data, message) -> None:
    with pytest.raises(FlashprobeError, match=message) as info:
        TrainConfig.from_dict(data)
    assert "\n" not in str(info.value)


def test_round_trip_through_plain_dicts() -> None:
    config = TrainConfig.from_dict(
        {
            "model": {
                "n_layer": 2,
                "layers": {1: {"spec": "paper-code", "heads": {0: {"impl": "math"}}}},
            },
            "optimizer": {"name": "muon", "betas": [0.9, 0.99], "lr": 2},
            "divergence": {"spike_sigma": 6},
            "metrics": {"capture_layers": [1], "capture_steps": [5, 10]},
        }
    )
    assert config.optimizer.betas == (0.9, 0.99) and config.optimizer.lr == 2.0
    assert config.metrics.capture_steps == (5, 10)
    again = TrainConfig.from_dict(config.to_dict())
    assert again.to_dict() == config.to_dict()
    assert again.model.head_groups(1) == config.model.head_groups(1)


def test_accumulation_from_batch_and_world_size() -> None:
    loop = LoopConfig(batch_size=16, micro_batch_size=4)
    assert loop.accumulation(1) == (4, 4) and loop.accumulation(2) == (4, 2)
    assert LoopConfig(batch_size=16).accumulation(4) == (4, 1)
    with pytest.raises(FlashprobeError, match="multiple of the world size"):
        loop.accumulation(3)
    with pytest.raises(FlashprobeError, match="must divide the per-rank batch"):
        LoopConfig(batch_size=16, micro_batch_size=3).accumulation(1)


def test_a_seed_torch_cannot_take_is_refused() -> None:
    with pytest.raises(FlashprobeError, match=r"train.seed must be in \[0, 2\*\*64\)"):
        TrainConfig.from_dict({"train": {"seed": 2**64}})
    assert TrainConfig.from_dict({"train": {"seed": 2**64 - 1}}).train.seed == 2**64 - 1
