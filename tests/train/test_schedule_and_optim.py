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


def test_sgd_uses_beta1_as_momentum_and_decays_only_matrices() -> None:
    model = tiny_model()
    config = OptimizerConfig(name="sgd", lr=0.5, betas=(0.8, 0.95), weight_decay=0.1)
    optimizer = build_optimizer(model, config)
    assert isinstance(optimizer, torch.optim.SGD)
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert decayed["momentum"] == 0.8 and all(p.dim() == 2 for p in decayed["params"])
    bias = plain["params"][0]
    before = bias.detach().clone()
    for _ in range(2):  # two steps of a constant gradient g: v = g, then 0.8 v + g
        bias.grad = torch.ones_like(bias)
        optimizer.step()
    assert torch.allclose(bias.detach(), before - 0.5 * (1.0 + 1.8))


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


def _reference_muon_with_adamw_step(params, grads, state, *, lr, betas, eps, wd, momentum,
                                    nesterov, use_muon):  # fmt: skip
    """One parameter at a time, the textbook way: what the multi-tensor step must equal."""
    import math

    beta1, beta2 = betas
    for p, g in zip(params, grads, strict=True):
        s = state.setdefault(id(p), {})
        if use_muon:
            buf = s.setdefault("buf", torch.zeros_like(p))
            buf.mul_(momentum).add_(g)
            direction = g.add(buf, alpha=momentum) if nesterov else buf
            update = newton_schulz(direction)
            p.mul_(1.0 - lr * wd).add_(update, alpha=-lr * 0.2 * math.sqrt(max(p.shape)))
        else:
            s["step"] = s.get("step", 0) + 1
            m = s.setdefault("m", torch.zeros_like(p)).lerp_(g, 1.0 - beta1)
            v = s.setdefault("v", torch.zeros_like(p))
            v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
            denom = (v / (1.0 - beta2 ** s["step"])).sqrt_().add_(eps)
            p.mul_(1.0 - lr * wd).addcdiv_(m, denom, value=-lr / (1.0 - beta1 ** s["step"]))


@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_with_adamw_step_equals_the_one_parameter_at_a_time_reference(nesterov) -> None:
    torch.manual_seed(0)
    shapes = [(24, 8), (8, 24), (24, 8), (8, 8)]  # two share a shape: one batched NS stack
    muon = [torch.randn(s) for s in shapes]
    adam = [torch.randn(5), torch.randn(3, 4)]
    mine = [p.clone().requires_grad_() for p in muon + adam]
    kw = dict(lr=0.02, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, momentum=0.95,
              nesterov=nesterov, ns_steps=5)  # fmt: skip
    optimizer = MuonWithAdamW(
        [{"params": mine[:4], "use_muon": True}, {"params": mine[4:], "use_muon": False}], **kw
    )
    ref = [p.clone() for p in muon + adam]
    state: dict = {}
    for _ in range(3):
        grads = [torch.randn_like(p) for p in ref]
        for p, g in zip(mine, grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
        common = dict(lr=0.02, betas=(0.9, 0.95), eps=1e-8, wd=0.1, momentum=0.95,
                      nesterov=nesterov)  # fmt: skip
        _reference_muon_with_adamw_step(ref[:4], grads[:4], state, use_muon=True, **common)
        _reference_muon_with_adamw_step(ref[4:], grads[4:], state, use_muon=False, **common)
    for p, r in zip(mine, ref, strict=True):
        torch.testing.assert_close(p.detach(), r, rtol=1e-5, atol=1e-6)
