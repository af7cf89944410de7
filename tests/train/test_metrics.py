"""Per-step metrics (flashprobe.train.metrics): W_Q / W_K spectral norms."""

from __future__ import annotations

import json

import pytest
import torch

from flashprobe.model import GPT, ModelConfig
from flashprobe.train.metrics import intact_end, qk_spectral_norms, truncate_jsonl


@pytest.mark.parametrize("kv_heads", [None, 2])
def test_spectral_norms_per_layer_and_head_match_a_direct_computation(kv_heads) -> None:
    torch.manual_seed(0)
    config = {"n_layer": 2, "n_head": 4, "n_kv_head": kv_heads, "n_embd": 32, "block_size": 8,
              "vocab_size": 64}  # fmt: skip
    model = GPT(ModelConfig.from_dict(config))
    norms = qk_spectral_norms(model)
    for layer in range(2):
        for name, weight in zip(("wq", "wk"), model.qk_weights(layer), strict=True):
            w = weight.detach().float()
            assert norms[name][layer] == float(torch.linalg.matrix_norm(w, ord=2))
            count = 4 if name == "wq" or kv_heads is None else kv_heads
            heads = [float(torch.linalg.matrix_norm(w[h * 8 : (h + 1) * 8], ord=2))
                     for h in range(count)]  # fmt: skip
            assert norms[f"{name}_heads"][layer] == heads


def _log(path, *lines: str) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def test_intact_end_names_the_first_damaged_line(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s, "loss": 1.0}) for s in range(5)]
    _log(path, *good)
    assert intact_end(path) is None and intact_end(tmp_path / "absent.jsonl") is None
    for bad in ("{torn", '{"loss": 1}', '{"step": "3"}', "[1, 2]", json.dumps({"step": 1})):
        _log(path, *good[:3], bad, *good[3:])
        assert intact_end(path) == (3, 4), bad  # steps 0-2 intact: resume at or before 3
    _log(path, "{torn", *good)
    assert intact_end(path) == (0, 1)


def test_truncate_keeps_the_intact_records_before_the_step(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s}) for s in range(6)]
    _log(path, *good[:4], "{torn", *good[4:])
    truncate_jsonl(path, 3)
    assert path.read_text().splitlines() == good[:3]
    _log(path, *good[:4], "{torn", *good[4:])
    truncate_jsonl(path, 6)  # never keeps what lies past a damaged line
    assert path.read_text().splitlines() == good[:4]
