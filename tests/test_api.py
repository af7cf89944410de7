"""flashprobe.attention: dispatch, autograd, stats, and one-line errors for bad input."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import flashprobe
from flashprobe.api import attention
from flashprobe.errors import FlashprobeError
from flashprobe.reference.emulator import emulate_forward
from flashprobe.reference.emulator_backward import emulate_backward
from flashprobe.spec import PRESETS, make_spec
from flashprobe.stats import AttentionStats

BF16 = torch.bfloat16


@pytest.mark.parametrize(
    "spec", ["sfa", PRESETS["sfa"], {"preset": "fa2", "softmax": "stabilized", "beta": 2}]
)
def test_forward_is_the_emulator_for_any_spelling_of_the_spec(make_qkv, spec) -> None:
    q, k, v, _ = make_qkv(1, 2, 20, 20, 16, BF16)
    o = attention(q, k, v, causal=True, spec=spec)
    assert torch.equal(o, emulate_forward(q, k, v, PRESETS["sfa"], causal=True).o)


def test_top_level_export_and_auto_backend_on_cpu(make_qkv) -> None:
    q, k, v, _ = make_qkv(1, 1, 9, 9, 16, BF16)
    assert flashprobe.attention is attention
    assert torch.equal(flashprobe.attention(q, k, v), attention(q, k, v, backend="emulator"))


@pytest.mark.parametrize("preset", ["fa2", "paper-code", "fp32"])
def test_gradients_are_the_emulated_backward(make_qkv, preset: str) -> None:
    """Includes fp32's delta_source o_fp32, which needs the forward's o_fp32 to be kept."""
    q, k, v, do = make_qkv(2, 2, 33, 33, 32, BF16, seed=1)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = attention(*leaves, causal=True, spec=preset, scale=0.3)
    o.backward(do)
    spec = PRESETS[preset]
    fwd = emulate_forward(q, k, v, spec, causal=True, scale=0.3)
    want = emulate_backward(
        q, k, v, fwd.o, do, fwd.lse, spec, causal=True, scale=0.3, o_fp32=fwd.o_fp32
    )
    for leaf, grad in zip(leaves, (want.dq, want.dk, want.dv), strict=True):
        assert leaf.grad is not None and leaf.grad.dtype == BF16
        assert torch.equal(leaf.grad, grad)


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["gqa", "mqa"])
def test_grouped_query_attention_is_attention_over_repeated_heads(make_qkv, kv_heads) -> None:
    """k, v with fewer heads: the forward is that of the repeated heads; a shared head's
    gradient is its query heads' unrounded gradients summed, rounded once (docs/semantics.md)."""
    q, k, v, do = make_qkv(2, 4, 21, 19, 16, BF16, seed=3, kv_heads=kv_heads)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = attention(*leaves, causal=True, spec="fa2")
    o.backward(do)
    group = 4 // kv_heads
    k_all, v_all = (t.repeat_interleave(group, dim=1) for t in (k, v))
    assert torch.equal(o, emulate_forward(q, k_all, v_all, PRESETS["fa2"], causal=True).o)
    want = emulate_backward(q, k, v, o.detach(), do, attention_lse(q, k, v), "fa2", causal=True)
    assert leaves[1].grad.shape == k.shape and leaves[2].grad.shape == v.shape
    for leaf, grad in zip(leaves, (want.dq, want.dk, want.dv), strict=True):
        assert torch.equal(leaf.grad, grad)


def attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return attention(q, k, v, causal=True, spec="fa2", return_stats=True)[1].lse


def test_return_stats(make_qkv) -> None:
    q, k, v, do = make_qkv(1, 2, 24, 24, 16, BF16)
    q.requires_grad_()
    o, stats = attention(q, k, v, causal=False, spec="fa2", return_stats=True)
    assert isinstance(stats, AttentionStats)
    assert stats.lse.shape == stats.row_max.shape == stats.p_bar_ones.shape == (1, 2, 24)
    assert stats.tie_events.dtype == torch.int32
    assert not stats.lse.requires_grad and o.requires_grad
    o.backward(do)
    assert q.grad is not None and torch.isfinite(q.grad.float()).all()


@pytest.mark.parametrize(
    ("overrides", "causal"),
    [
        ({}, True),
        ({}, False),
        ({"softmax": "stabilized", "tie_tolerance": 10.0}, True),  # every tile row shifts
        ({"softmax": "fused_scale"}, False),
    ],
)
def test_gradcheck_fp64(overrides: dict, causal: bool) -> None:
    """fp64 inputs keep every intermediate in fp64, so the backward's algebra (scale, causal
    mask, δ, the stabilized shift) is checked against finite differences of the forward."""
    spec = make_spec("fp32", {"block_n": 16, **overrides})
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 1, m, 8, generator=gen, dtype=torch.float64).requires_grad_()
        for m in (6, 18, 18)  # two key tiles, the second partial
    )

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return attention(q, k, v, causal=causal, spec=spec, backend="emulator")

    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-6, atol=1e-8, rtol=1e-6)


def test_a_tiny_model_trains() -> None:
    """A one-layer attention model with bf16 attention learns a fixed target (loss drops)."""
    torch.manual_seed(0)
    heads, dim, seq = 2, 16, 12
    proj = torch.nn.Linear(32, 3 * heads * dim)
    out = torch.nn.Linear(heads * dim, 32)
    params = [*proj.parameters(), *out.parameters()]
    opt = torch.optim.Adam(params, lr=1e-2)
    x, target = torch.randn(4, seq, 32), torch.randn(4, seq, 32)

    def loss_fn() -> torch.Tensor:
        q, k, v = proj(x).unflatten(-1, (3, heads, dim)).permute(2, 0, 3, 1, 4).to(BF16)
        o = flashprobe.attention(q, k, v, causal=True, spec="sfa")
        return torch.nn.functional.mse_loss(out(o.float().transpose(1, 2).flatten(2)), target)

    first = loss_fn()
    first.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
    assert proj.weight.grad is not None and proj.weight.grad.abs().sum() > 0  # through attention
    for _ in range(30):
        opt.step()
        opt.zero_grad()
        loss_fn().backward()
    assert loss_fn().item() < 0.9 * first.item()


# -- the triton backend -----------------------------------------------------------------------
def test_triton_backend_is_called_with_the_resolved_spec(make_qkv, monkeypatch) -> None:
    calls: list[dict] = []

    def fake_triton_attention(q, k, v, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs)
        return "from-triton"

    fake = types.ModuleType("flashprobe.kernels")
    fake.triton_attention = fake_triton_attention  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashprobe.kernels", fake)
    q, k, v, _ = make_qkv(1, 1, 8, 8, 16, BF16)
    got = attention(q, k, v, causal=False, spec="paper-code", backend="triton", scale=0.5)
    assert got == "from-triton"
    assert calls == [
        {"causal": False, "spec": PRESETS["paper-code"], "scale": 0.5, "return_stats": False}
    ]
    # auto only picks triton for CUDA tensors: these are on the CPU.
    assert isinstance(attention(q, k, v, backend="auto"), torch.Tensor)


def test_missing_triton_backend_is_a_one_line_error(make_qkv, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "flashprobe.kernels", None)  # makes the import fail
    q, k, v, _ = make_qkv(1, 1, 8, 8, 16, BF16)
    with pytest.raises(FlashprobeError, match=r"^the triton backend is not available: ") as err:
        attention(q, k, v, backend="triton")
    assert "\n" not in str(err.value)


# -- bad input ----------------------------------------------------------------------------------
def _qkv(*shapes: tuple[int, ...], dtypes: tuple[torch.dtype, ...] = (BF16,) * 3):
    return [torch.zeros(s, dtype=d) for s, d in zip(shapes, dtypes, strict=True)]


GOOD = (1, 2, 8, 16)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (_qkv(GOOD, GOOD, GOOD), {"backend": "cuda"}, "unknown backend 'cuda'"),
        (_qkv((2, 8, 16), (2, 8, 16), (2, 8, 16)), {}, "q must be 4-D"),
        (_qkv(GOOD, (1, 3, 8, 16), (1, 3, 8, 16)), {}, "key/value heads must divide"),
        (_qkv(GOOD, (1, 1, 8, 16), (1, 2, 8, 16)), {}, "expected q \\[B,H,M,D\\]"),
        (_qkv(GOOD, (2, 2, 8, 16), (2, 2, 8, 16)), {}, "expected q \\[B,H,M,D\\]"),
        (_qkv(GOOD, (1, 2, 8, 32), (1, 2, 8, 32)), {}, "expected q \\[B,H,M,D\\]"),
        (_qkv(GOOD, GOOD, (1, 2, 9, 16)), {}, "expected q \\[B,H,M,D\\]"),
        (_qkv(GOOD, GOOD, (1, 2, 0, 16)), {}, "v is empty"),
        (_qkv(GOOD, GOOD, GOOD, dtypes=(BF16, torch.float16, BF16)), {}, "share one dtype"),
        (_qkv(GOOD, GOOD, GOOD, dtypes=(torch.int32,) * 3), {}, "not supported"),
        (_qkv(GOOD, GOOD, GOOD), {"spec": "flash9"}, "unknown preset 'flash9'"),
        (_qkv(GOOD, GOOD, GOOD), {"spec": {"blockn": 32}}, "unknown kernel spec field"),
        (_qkv(GOOD, GOOD, GOOD), {"spec": {"block_n": 48}}, "block_n must be a power of two"),
        (_qkv(GOOD, GOOD, GOOD), {"spec": 3}, "kernel spec must be"),
        (_qkv(GOOD, GOOD, GOOD), {"scale": -1.0}, "scale must be a finite number"),
        (_qkv(GOOD, GOOD, GOOD), {"scale": float("nan")}, "scale must be a finite number"),
        (_qkv(GOOD, GOOD, GOOD), {"causal": "yes"}, "causal must be True or False"),
        (_qkv(GOOD, GOOD, GOOD), {"return_stats": "no"}, "return_stats must be True or False"),
        ([torch.zeros(GOOD), [0.0], torch.zeros(GOOD)], {}, "k must be a torch.Tensor"),
    ],
)
def test_bad_input_is_a_one_line_flashprobe_error(args, kwargs, message: str) -> None:
    with pytest.raises(FlashprobeError, match=message) as err:
        attention(*args, **kwargs)
    assert "\n" not in str(err.value)


def test_an_emulator_problem_larger_than_memory_is_refused_at_once(monkeypatch) -> None:
    """The emulator holds every score: 2 × 3 × 64 × 48 of them need ~0.6 MB, refused on a
    device of 100 kB, run on one of 10 MB."""
    import flashprobe.api as api

    assert api.device_memory(torch.device("cpu")) > 2**30  # this machine's RAM, read
    q, k = torch.zeros(2, 3, 64, 16), torch.zeros(2, 3, 48, 16)
    monkeypatch.setattr(api, "device_memory", lambda device: 100_000)
    with pytest.raises(FlashprobeError, match=r"2×3×64×48 attention scores .* use the Triton"):
        attention(q, k, k, backend="emulator")
    monkeypatch.setattr(api, "device_memory", lambda device: 10_000_000)
    assert attention(q, k, k, backend="emulator").shape == q.shape


@pytest.mark.gpu
def test_emulator_backend_on_cuda_trains(make_qkv) -> None:
    if not torch.cuda.is_available():
        pytest.fail("the gpu marker needs a CUDA device")
    q, k, v, do = make_qkv(2, 2, 40, 40, 32, BF16, seed=2)
    cpu_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    gpu_leaves = [t.cuda().requires_grad_() for t in (q, k, v)]
    attention(*cpu_leaves, spec="fp32", backend="emulator").backward(do)
    attention(*gpu_leaves, spec="fp32", backend="emulator").backward(do.cuda())
    for cpu, gpu in zip(cpu_leaves, gpu_leaves, strict=True):
        assert gpu.grad is not None and gpu.grad.is_cuda
        torch.testing.assert_close(gpu.grad.cpu(), cpu.grad, rtol=2e-2, atol=1e-3)
