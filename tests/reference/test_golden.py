"""The fp64 golden against autograd through independent fp64 PyTorch attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from flashprobe.reference.golden import golden_backward, golden_forward


@pytest.mark.parametrize(
    ("m", "n", "causal"),
    [
        (1, 1, True),
        (17, 17, True),
        (33, 20, True),
        (20, 33, True),
        (17, 40, False),
        (40, 17, False),
    ],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_golden_matches_fp64_autograd(
    make_qkv, m: int, n: int, causal: bool, dtype: torch.dtype
) -> None:
    q, k, v, do = make_qkv(2, 2, m, n, 24, dtype, seed=m * 100 + n)
    scale = 0.3
    gold = golden_forward(q, k, v, causal=causal, scale=scale)
    grads = golden_backward(q, k, v, do, causal=causal, scale=scale)

    leaves = [t.to(torch.float64).requires_grad_() for t in (q, k, v)]
    mask = torch.ones(m, n, dtype=torch.bool).tril() if causal else None
    o = F.scaled_dot_product_attention(*leaves, attn_mask=mask, scale=scale)
    o.backward(do.to(torch.float64))
    s = (leaves[0] @ leaves[1].transpose(-2, -1)).detach() * scale
    if causal:
        s = s.masked_fill(~mask, float("-inf"))

    for got, want in [
        (gold.o, o),
        (gold.lse, torch.logsumexp(s, dim=-1)),
        (grads.dq, leaves[0].grad),
        (grads.dk, leaves[1].grad),
        (grads.dv, leaves[2].grad),
        (grads.delta, (do.to(torch.float64) * o).sum(-1)),
    ]:
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want.detach(), rtol=1e-12, atol=1e-12)


def test_golden_default_scale_and_causal_alignment(make_qkv) -> None:
    q, k, v, _ = make_qkv(1, 1, 5, 5, 16, torch.float32)
    gold = golden_forward(q, k, v, causal=True)
    # Top-left aligned: query 0 sees only key 0, so its output is exactly v[0].
    torch.testing.assert_close(gold.o[..., 0, :], v[..., 0, :].to(torch.float64))
    explicit = golden_forward(q, k, v, causal=True, scale=0.25)  # 1/sqrt(16)
    assert torch.equal(gold.o, explicit.o)
    assert gold.p is not None
    torch.testing.assert_close(gold.p.sum(-1), torch.ones(1, 1, 5, dtype=torch.float64))


def _misaligned(t: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of t that starts `offset` elements into a fresh buffer (an odd address for MKL)."""
    buffer = torch.empty(t.numel() + offset, dtype=t.dtype)
    return buffer[offset:].view(t.shape).copy_(t)


def test_golden_bits_do_not_depend_on_thread_count_or_alignment(make_qkv) -> None:
    """One head over 1,024 keys: MKL splits P·V's sum over the keys between threads when a
    batch has fewer matrices than threads, so without the golden's pinned thread count the
    bits follow torch.set_num_threads (seen here: 2, 3 and 4 threads each differ from 1)."""
    q, k, v, do = make_qkv(1, 1, 1024, 1024, 32, torch.bfloat16, seed=7)
    before = torch.get_num_threads()
    runs = []
    try:
        for threads, offset in [(1, 0), (2, 0), (3, 0), (4, 0), (2, 1), (3, 3), (1, 5)]:
            torch.set_num_threads(threads)
            # fp64 inputs reach the matmuls as they are (no upcast copy): odd addresses
            inputs = [_misaligned(t.to(torch.float64), offset) for t in (q, k, v, do)]
            fwd = golden_forward(*inputs[:3], causal=True)
            bwd = golden_backward(*inputs, causal=True)
            assert torch.get_num_threads() == threads  # the caller's setting is restored
            runs.append([fwd.o, fwd.lse, bwd.dq, bwd.dk, bwd.dv, bwd.delta])
    finally:
        torch.set_num_threads(before)
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(run, runs[0], strict=True))
