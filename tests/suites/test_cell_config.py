"""Cell configs: suite shorthands, normalisation, and the checks that must run before training."""

from __future__ import annotations

import numpy as np
import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.suites.cell_config import (
    check_runnable,
    normalise_cell_config,
    parse_bytes,
    resolve_cell_config,
)

BASE = {
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32},
    "train": {"steps": 8, "device": "cpu"},
    "kernel": {"preset": "sfa", "beta": 4},
    "capture": {"layers": [1], "steps": [3], "max_bytes": "2MiB"},
    "seed": 5,
}


def test_shorthands_reach_the_train_config() -> None:
    setup = resolve_cell_config(BASE)
    spec = setup.train.model.attention.spec
    assert spec.softmax == "stabilized" and spec.beta == 4.0
    assert setup.train.train.seed == 5
    assert setup.train.metrics.capture_layers == (1,) and setup.train.metrics.capture_steps == (3,)
    assert setup.capture.max_bytes == 2 * 2**20 and setup.capture.enabled


def test_normalised_config_round_trips() -> None:
    normal = normalise_cell_config(BASE)
    assert "kernel" not in normal and "seed" not in normal
    again = resolve_cell_config(normal)
    assert again == resolve_cell_config(BASE)
    assert normalise_cell_config(normal) == normal


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"colour": 1}, "unknown config section 'colour'"),
        ({"kernel": {"preset": "fa2", "colour": 1}}, "kernel: unknown kernel spec field 'colour'"),
        ({"kernel": "nope"}, "kernel: unknown preset 'nope'"),
        ({"model": {"attention": {"spec": "fa2"}}}, "set the kernel in one place"),
        ({"train": {"seed": 1}}, "seeds"),
        ({"train": {"steps": "many"}}, "train.steps must be an integer"),
        ({"optimizer": {"lr": -1}}, "optimizer.lr must be > 0"),
        ({"capture": {"layers": [1], "steps": [8]}}, "beyond the run"),
        ({"capture": {"layers": [5], "steps": [1]}}, "layer 5 out of range"),
        ({"capture": {"max_bytes": "lots"}}, "capture.max_bytes must be a byte count"),
        ({"capture": {"shape": 1}}, "unknown key capture.shape"),
        ({"metrics": {"capture_layers": [0]}}, "set captures in one place"),
    ],
)
def test_bad_values_name_their_key(change, needle: str) -> None:
    config = {**BASE, **change}
    if "model" in change:
        config["model"] = {**BASE["model"], **change["model"]}
    if "train" in change:
        config["train"] = {**BASE["train"], **change["train"]}
    with pytest.raises(FlashprobeError, match=needle):
        normalise_cell_config(config)


def test_cuda_only_options_are_refused_without_a_gpu() -> None:
    cuda = resolve_cell_config({**BASE, "train": {"steps": 8, "device": "cuda"}}).train
    with pytest.raises(FlashprobeError, match="no CUDA GPU"):
        check_runnable(cuda, cuda=False)
    triton = {**BASE, "model": {**BASE["model"], "layers": {1: {"backend": "triton"}}}}
    with pytest.raises(FlashprobeError, match="layer 1: backend triton needs a CUDA GPU"):
        check_runnable(resolve_cell_config(triton).train, cuda=False)
    check_runnable(resolve_cell_config(triton).train, cuda=True)


def test_token_folder_is_checked(tmp_path) -> None:
    def check(config: dict) -> None:  # what a run checks on its machine (runner.prepare)
        check_runnable(resolve_cell_config(config).train)

    config = {**BASE, "data": {"source": "bin", "path": str(tmp_path), "vocab_size": 300}}
    normalise_cell_config(config)  # normalising needs no data: a dry run on another machine
    with pytest.raises(FlashprobeError, match=r"no train\.bin there"):
        check(config)
    for name in ("train.bin", "val.bin"):
        np.arange(500, dtype=np.uint16).tofile(tmp_path / name)
    check(config)
    small = {**config, "model": {**BASE["model"], "vocab_size": 100}}
    with pytest.raises(FlashprobeError, match="smaller than the data's vocabulary"):
        check(small)


def test_byte_counts() -> None:
    assert parse_bytes(10, "x") == 10
    assert parse_bytes("1.5 KiB", "x") == 1536 and parse_bytes("2GB", "x") == 2 * 10**9
    with pytest.raises(FlashprobeError):
        parse_bytes(True, "x")
