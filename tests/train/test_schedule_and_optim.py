"""lr schedule, weight-decay groups, and Muon's orthogonalisation."""

from __future__ import annotations

import itertools

import pytest
import torch

from flashprobe.model import GPT, ModelConfig
from flashprobe.train import OptimizerConfig, ScheduleConfig
from flashprobe.train.muon import MuonWithAdamW, newton_schulz
from flashprobe.train.optim import build_optimizer
from flashprobe.train.schedule import lr_at


def test_warmup_cosine_floor() -> None:
    schedule = ScheduleConfig(warmup_steps=10, min_lr=1e-4)
    lrs = [lr_at(t, 1e-3, schedule, total_steps=110) for t in range(120)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert lrs[60] == pytest.approx((1e-3 + 1e-4) / 2)
    assert lrs[110] == lrs[119] == 1e-4
    assert all(a >= b for a, b in itertools.pairwise(lrs[9:]))


def test_constant_schedule_and_explicit_decay_steps() -> None:
    assert lr_at(50, 1e-3, ScheduleConfig(kind="constant", warmup_steps=0), 100) == 1e-3
    schedule = ScheduleConfig(warmup_steps=0, decay_steps=20, min_lr=0.0)
    assert lr_at(20, 1e-3, schedule, 100) == 0.0


def tiny_model() -> GPT:
    torch.manual_seed(0)
    config = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 64,
              "bias": True, "attention": "sdpa"}  # fmt: skip
    return GPT(ModelConfig.from_dict(config))


def test_adamw_decays_only_two_dimensional_weights() -> None:
    model = tiny_model()
    optimizer = build_optimizer(model, OptimizerConfig(weight_decay=0.1))
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and all(p.dim() == 2 for p in decayed["params"])
    assert plain["weight_decay"] == 0.0 and all(p.dim() == 1 for p in plain["params"])
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == sum(
        p.numel() for p in model.parameters()
    )


def test_muon_takes_hidden_matrices_and_adamw_the_rest() -> None:
    model = tiny_model()
    optimizer = build_optimizer(model, OptimizerConfig(name="muon"))
    assert isinstance(optimizer, MuonWithAdamW)
    muon = next(g for g in optimizer.param_groups if g["use_muon"])["params"]
    assert len(muon) == 2 * 4  # c_attn, c_proj, c_fc, mlp c_proj per layer
    assert not any(p is model.transformer.wte.weight for p in muon)
    idx = torch.randint(0, 64, (2, 16))
    before = [p.detach().clone() for p in model.parameters()]
    model(idx, idx)[1].backward()
    optimizer.step()
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))


def test_newton_schulz_orthogonalises() -> None:
    torch.manual_seed(0)
    for shape in ((32, 96), (96, 32)):
        g = torch.randn(shape) @ torch.diag(torch.logspace(-1, 1, shape[1]))
        singular = torch.linalg.svdvals(newton_schulz(g, steps=5))
        assert singular.max() < 1.3 and singular.min() > 0.5


def test_newton_schulz_on_a_stack_orthogonalises_each_matrix_alone() -> None:
    torch.manual_seed(0)
    for shape in ((3, 32, 96), (3, 96, 32)):
        stack = torch.randn(shape)
        stack[1] *= 100.0  # one matrix much larger: normalisation must be per matrix
        batched = newton_schulz(stack, steps=5)
        one_by_one = torch.stack([newton_schulz(g, steps=5) for g in stack])
        torch.testing.assert_close(batched, one_by_one, rtol=1e-4, atol=1e-5)
