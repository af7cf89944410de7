"""Per-step metrics (flashprobe.train.metrics): W_Q / W_K spectral norms."""

from __future__ import annotations

import pytest
import torch

from flashprobe.model import GPT, ModelConfig
from flashprobe.train.metrics import qk_spectral_norms


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
