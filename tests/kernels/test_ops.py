"""flashprobe.kernels.ops: the custom ops that torch.compile sees, checked by
`torch.library.opcheck` (schema, fake tensors, autograd registration), and a compiled model
that computes what the eager one does, with no graph break."""

from __future__ import annotations

import pytest
import torch

import flashprobe
from flashprobe.kernels import ops
from flashprobe.spec import make_spec

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SPECS = {
    "fa2": make_spec("fa2"),
    "sfa": make_spec("sfa"),
    "o_fp32": make_spec("fa2", {"delta_source": "o_fp32", "block_n": 16}),
}


def inputs(
    seed: int, m: int = 40, n: int = 40, d: int = 32, kv_heads: int = 2
) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shapes = [(1, 2, m, d), (1, kv_heads, n, d), (1, kv_heads, n, d)]
    return [torch.randn(s, generator=gen).to(DEVICE, torch.bfloat16) for s in shapes]


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("instrument", [False, True])
def test_the_forward_op_passes_opcheck(name: str, instrument: bool) -> None:
    q, k, v = (t.requires_grad_() for t in inputs(0))
    spec = SPECS[name].json
    torch.library.opcheck(ops.attention_fwd, (q, k, v, True, spec, 0.2, instrument, "ordered"))


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["mha", "mqa"])
def test_the_backward_op_passes_opcheck(kv_heads: int) -> None:
    """Including k, v shared by both query heads: dK, dV come back in k's shape."""
    q, k, v = inputs(1, kv_heads=kv_heads)
    spec = SPECS["o_fp32"]
    o, lse, o32, *_ = ops.attention_fwd(q, k, v, False, spec.json, 0.2, False, "ordered")
    assert o32.shape == q.shape, "the o_fp32 spec keeps the fp32 O for its δ"
    do = torch.randn_like(o)
    args = (q, k, v, o, lse, do, o32, False, spec.json, 0.2, "ordered")
    torch.library.opcheck(ops.attention_bwd, args)


@pytest.mark.parametrize("return_stats", [False, True])
def test_a_compiled_call_has_no_graph_break_and_the_same_bits(return_stats: bool) -> None:
    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
        out = flashprobe.attention(q, k, v, causal=True, spec="sfa", backend="triton",
                                   return_stats=return_stats)  # fmt: skip
        o, stats = out if return_stats else (out, None)
        loss = (o.float() * torch.linspace(-1, 1, o.shape[-1], device=o.device)).sum()
        extras = [stats.lse, stats.row_max, stats.tie_events, stats.p_bar_ones] if stats else []
        return [loss, o, *extras]

    def run(fn) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
        leaves = [t.requires_grad_() for t in inputs(2, m=50, n=50)]
        loss, *outputs = fn(*leaves)
        loss.backward()
        return [t.detach() for t in outputs] + [t.grad for t in leaves]

    torch._dynamo.reset()
    explained = torch._dynamo.explain(step)(*(t.requires_grad_() for t in inputs(3)))
    assert explained.graph_break_count == 0, explained.break_reasons
    eager = run(step)
    compiled = run(torch.compile(step, backend="aot_eager", fullgraph=True))
    assert len(eager) == len(compiled) == (8 if return_stats else 4)
    for a, b in zip(eager, compiled, strict=True):
        assert torch.equal(a, b)


def test_a_compiled_call_passes_the_dq_accumulation_to_the_backward(monkeypatch) -> None:
    """The backward op runs the launch with the forward call's dq_accumulation."""
    seen = []
    launch_backward = ops.attention_backward

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs["dq_accumulation"])
        return launch_backward(*args, **kwargs)

    monkeypatch.setattr(ops, "attention_backward", spy)

    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        from flashprobe.kernels import triton_attention

        return triton_attention(q, k, v, causal=True, spec=SPECS["fa2"],
                                dq_accumulation="atomic").float().sum()  # fmt: skip

    torch._dynamo.reset()
    leaves = [t.requires_grad_() for t in inputs(4)]
    torch.compile(step, backend="aot_eager", fullgraph=True)(*leaves).backward()
    assert seen == ["atomic"]
    assert all(t.grad is not None and bool(torch.isfinite(t.grad).all()) for t in leaves)
