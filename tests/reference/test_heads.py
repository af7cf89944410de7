"""Grouped-query attention in the references: the golden and the emulator over shared heads."""

from __future__ import annotations

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.reference.emulator import emulate_forward
from flashprobe.reference.emulator_backward import emulate_backward
from flashprobe.reference.golden import golden_backward, golden_forward
from flashprobe.reference.heads import expand_kv, group_size, sum_groups


def test_group_size_and_its_error() -> None:
    q = torch.zeros(1, 6, 4, 8)
    assert group_size(q, torch.zeros(1, 2, 4, 8)) == 3
    assert group_size(q, torch.zeros(1, 6, 4, 8)) == 1
    with pytest.raises(FlashprobeError, match="q has 6 heads and k, v have 4"):
        group_size(q, torch.zeros(1, 4, 4, 8))


def test_expand_repeats_consecutive_heads_and_sum_groups_inverts_it() -> None:
    k = torch.arange(2.0).view(1, 2, 1, 1)
    assert expand_kv(k, 3).flatten().tolist() == [0, 0, 0, 1, 1, 1]
    assert torch.equal(sum_groups(expand_kv(k, 3), 3), 3 * k)


@pytest.mark.parametrize("causal", [False, True])
def test_golden_over_shared_heads_is_the_golden_of_repeated_heads(make_qkv, causal) -> None:
    q, k, v, do = make_qkv(2, 6, 13, 11, 8, torch.bfloat16, seed=4, kv_heads=2)
    k_all, v_all = expand_kv(k, 3), expand_kv(v, 3)
    assert torch.equal(golden_forward(q, k, v, causal=causal).o,
                       golden_forward(q, k_all, v_all, causal=causal).o)  # fmt: skip
    got = golden_backward(q, k, v, do, causal=causal)
    want = golden_backward(q, k_all, v_all, do, causal=causal)
    assert got.dk.shape == k.shape and got.dv.shape == v.shape
    torch.testing.assert_close(got.dq, want.dq, rtol=0, atol=0)
    torch.testing.assert_close(got.dk, sum_groups(want.dk, 3), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.dv, sum_groups(want.dv, 3), rtol=1e-12, atol=1e-12)


def test_emulator_rounds_a_shared_heads_gradient_once(make_qkv) -> None:
    """With fp32 inputs the emulator keeps fp32 gradients: summing the repeated heads' fp32
    gradients and rounding that to bf16 must give the bf16 run's dK exactly when every rounding
    step before the sum is inactive, which holds for the fp32 spec (no 16-bit rounding)."""
    q, k, v, do = make_qkv(1, 4, 9, 7, 16, torch.bfloat16, seed=5, kv_heads=1)
    fwd = emulate_forward(q, k, v, "fp32", causal=True)
    got = emulate_backward(q, k, v, fwd.o, do, fwd.lse, "fp32", causal=True, o_fp32=fwd.o_fp32)
    k_all, v_all = expand_kv(k, 4), expand_kv(v, 4)
    fwd32 = emulate_forward(*(t.float() for t in (q, k_all, v_all)), "fp32", causal=True)
    per_head = emulate_backward(
        *(t.float() for t in (q, k_all, v_all)), fwd32.o, do.float(), fwd32.lse, "fp32",
        causal=True, o_fp32=fwd32.o_fp32,
    )  # fmt: skip
    assert torch.equal(got.dk, sum_groups(per_head.dk, 4).to(torch.bfloat16))
    assert torch.equal(got.dv, sum_groups(per_head.dv, 4).to(torch.bfloat16))
