"""`flashprobe bias`'s knobs: --variant strings and every check of the config."""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.probes.bias_config import BiasConfig, default_variants, parse_variant, validate
from flashprobe.spec import make_spec


def test_parse_variant() -> None:
    v = parse_variant("fa2:softmax=stabilized,beta=4")
    assert v.spec == make_spec("fa2", {"softmax": "stabilized", "beta": 4}) and v.data == {}
    v = parse_variant("paper-code:ties=1,block_n=full")
    assert v.data == {"ties": 1} and v.spec.block_n is None
    assert parse_variant("exact:tail_v_mean=0").spec is None
    assert len(default_variants()) == len(set(default_variants()))


@pytest.mark.parametrize(
    "text",
    ["nope", "fa2:nope=1", "sfa:beta=0.5", "fa2:", ":beta=2", "exact:beta=4", "fa2:ties=x"],
)
def test_bad_variants(text: str) -> None:
    with pytest.raises(FlashprobeError):
        parse_variant(text)


@pytest.mark.parametrize(
    "kw",
    [
        {"rows": 0},
        {"rows": 1},
        {"ties": 0},
        {"ties": 17},
        {"keys": 2, "ties": 2},
        {"v_std": -1.0},
        {"v_mean": math.nan},
        {"gap": (5.0, 1.0)},
        {"gap": (0.0, 1.0)},
        {"head_dim": 0},
        {"seed": -1},
        {"seed": 2**64},  # torch.Generator.manual_seed takes 64 bits
        {"tie_placement": "middle"},
        {"score_grid": "fp16"},
        {"device": "tpu"},
        {"variants": ()},
        {"rows": 1 << 20, "keys": 1 << 12},
    ],
)
def test_bad_config(kw: dict) -> None:
    with pytest.raises(FlashprobeError):
        validate(BiasConfig(**kw))


@pytest.mark.parametrize("max_score", [(1e39, 1e39), (-1e39, 0.0)])
def test_a_max_score_beyond_fp32_names_max_score(max_score: tuple[float, float]) -> None:
    # the scores are fp32: the error blamed --gap ("tail scores round onto the row max")
    with pytest.raises(FlashprobeError, match="--max-score"):
        validate(BiasConfig(max_score=max_score))


def test_a_key_given_twice_is_refused() -> None:
    # `paper-code:ties=1,ties=2` used to run ties=2 without a word
    for text in ("paper-code:ties=1,ties=2", "sfa:beta=3,beta=4"):
        with pytest.raises(FlashprobeError, match="given twice"):
            parse_variant(text)


def test_default_beta_must_exceed_one() -> None:
    with pytest.raises(FlashprobeError, match="beta"):
        default_variants([0.5])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu_is_a_one_line_error() -> None:
    with pytest.raises(FlashprobeError, match="cuda"):
        validate(BiasConfig(device="cuda"))
