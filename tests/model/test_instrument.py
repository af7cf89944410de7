"""Attention stats and Q/K/V/O/LSE/dO capture through GPT.instrument()."""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.model import GPT, ModelConfig

TINY = {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 32, "vocab_size": 256}


def tiny(**overrides) -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig.from_dict({**TINY, **overrides}))


def test_capture_returns_forward_tensors_and_do() -> None:
    model = tiny(attention="math")
    idx = torch.randint(0, 256, (2, 32))
    with model.instrument(stats=False, capture_layers=[1]) as record:
        _, loss = model(idx, idx)
        loss.backward()
    names = sorted(record.tensors)
    assert names == [f"layer1.{n}" for n in ("do", "k", "lse", "o", "q", "v")]
    assert record.tensors["layer1.q"].shape == (2, 4, 32, 16)
    assert record.tensors["layer1.lse"].shape == (2, 4, 32)
    assert record.tensors["layer1.do"].abs().sum() > 0
    # LSE is consistent with the captured q, k.
    q, k = record.tensors["layer1.q"], record.tensors["layer1.k"]
    scores = (q @ k.transpose(-2, -1)) / 4.0
    scores = scores.masked_fill(torch.ones(32, 32, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(record.tensors["layer1.lse"], scores.logsumexp(-1))
    assert all(attn.recorder is None for attn in model.attention_layers)


def test_stats_per_layer_and_head_accumulate_over_forwards() -> None:
    model = tiny(attention="sdpa")
    idx = torch.randint(0, 256, (2, 32))
    with model.instrument() as once:
        model(idx)
    with model.instrument() as twice:
        model(idx)
        model(idx)
    assert sorted(once.stats) == [0, 1]
    torch.testing.assert_close(once.stats[0].max_logit, twice.stats[0].max_logit)
    entry = once.stats_dict()["0"]
    assert len(entry["max_logit"]) == 4 and entry["tie_events"] == [None] * 4


def test_flashprobe_stats_count_ties_and_ones_per_head() -> None:
    pytest.importorskip("flashprobe.api")
    model = tiny(layers={1: {"heads": {0: {"impl": "sdpa"}}}})
    with torch.autocast("cpu", dtype=torch.bfloat16), model.instrument() as record:
        model(torch.randint(0, 256, (2, 32)))
    layer1 = record.stats_dict()["1"]
    assert layer1["p_bar_ones"][0] is None  # sdpa head: not measured
    assert all(v is not None and v >= 2 * 32 for v in layer1["p_bar_ones"][1:])  # ≥ 1 per row


def test_capture_layer_out_of_range() -> None:
    with pytest.raises(FlashprobeError, match="capture layer 2 out of range"):
        with tiny().instrument(capture_layers=[2]):
            pass
