"""Attention stats and X/Q/K/V/O/LSE/dO capture through GPT.instrument()."""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.model import GPT, ModelConfig
from flashprobe.model.instrument import KeyGradStats, LayerStats

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
    assert names == [f"layer1.{n}" for n in ("do", "k", "lse", "o", "q", "v", "x")]
    assert record.tensors["layer1.q"].shape == (2, 4, 32, 16)
    assert record.tensors["layer1.x"].shape == (2, 32, 64)
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


def test_row_max_extremes_per_head_and_their_merge() -> None:
    row_max = torch.tensor([[[1.0, -3.0], [5.0, 2.0]], [[0.5, 4.0], [-90.0, 7.0]]])  # b, h, rows
    stats = LayerStats.from_rows(row_max, None, None)
    assert stats.max_logit.tolist() == [4.0, 7.0]
    assert stats.min_row_max.tolist() == [-3.0, -90.0]  # the rows SFA's m = 0 would underflow
    other = LayerStats.from_rows(torch.tensor([[[-10.0], [20.0]]]), None, None)
    merged = stats.merge(other)
    assert merged.max_logit.tolist() == [4.0, 20.0]
    assert merged.min_row_max.tolist() == [-10.0, -90.0]
    assert stats.to_dict()["min_row_max"] == [-3.0, -90.0]


def test_stats_stay_on_the_attention_device_until_read() -> None:
    """Reducing and merging stats must not copy to the host (a sync per layer and step): on
    the meta device, any such copy raises."""

    rows = torch.zeros(2, 3, 5, device="meta")
    counts = torch.zeros(2, 3, 5, dtype=torch.int32, device="meta")
    stats = LayerStats.from_rows(rows, counts, counts, torch.zeros(2, 3, 4, device="meta"))
    merged = stats.merge(stats)
    assert all(getattr(merged, n).device.type == "meta" for n in LayerStats.FIELDS)
    grads = KeyGradStats.from_grads(torch.zeros(2, 3, 5, 4, device="meta"),
                                    torch.zeros(2, 3, 5, 4, device="meta"))  # fmt: skip
    assert grads.merge(grads).leak_sq.device.type == "meta"


def test_flashprobe_stats_count_ties_and_ones_per_head() -> None:
    pytest.importorskip("flashprobe.api")
    model = tiny(layers={1: {"heads": {0: {"impl": "sdpa"}}}})
    with torch.autocast("cpu", dtype=torch.bfloat16), model.instrument() as record:
        model(torch.randint(0, 256, (2, 32)))
    layer1 = record.stats_dict()["1"]
    assert layer1["p_bar_ones"][0] is None  # sdpa head: not measured
    assert all(v is not None and v >= 2 * 32 for v in layer1["p_bar_ones"][1:])  # ≥ 1 per row


@pytest.mark.parametrize("on_kernels", [False, True], ids=["emulator", "triton"])
def test_softmax_sum_bias_is_one_sided_for_a_bf16_running_l_only(on_kernels: bool) -> None:
    """Peaked rows (each query's own key dominates): with P̄ = 1 at the max, a bf16 ℓ drops the
    tail, so the backward's softmax sums above 1; an fp32 ℓ leaves only fp32 rounding. The
    emulator checks 64 sampled rows, the Triton preprocess kernel every row."""
    from flashprobe.api import attention
    from flashprobe.model.attention import _softmax_sum_error

    g = torch.Generator().manual_seed(0)
    shape = (8, 4, 128, 16)
    q = torch.randn(shape, generator=g)
    k = 6 * q + 0.5 * torch.randn(shape, generator=g)
    q, k, v = q.bfloat16(), k.bfloat16(), torch.randn(shape, generator=g).bfloat16()
    if on_kernels and torch.cuda.is_available():  # else the interpreter (tests/conftest.py)
        q, k, v = q.cuda(), k.cuda(), v.cuda()
    t, mean = {}, {}
    for preset in ("paper-code", "fa2"):
        _, stats = attention(q, k, v, causal=True, spec=preset, backend="emulator",
                             return_stats=True)  # fmt: skip
        err = _softmax_sum_error(q, k, stats.lse, preset, on_kernels=on_kernels).double()
        assert err.shape == (8, 4, 128 if on_kernels else 64)
        mean[preset] = err.mean().item()
        t[preset] = mean[preset] / (err.std().item() / err.numel() ** 0.5)
    assert t["paper-code"] > 4 and mean["paper-code"] > 5e-5, (t, mean)
    assert abs(mean["fa2"]) < 1e-6, mean


def test_flashprobe_stats_record_the_softmax_sum_bias_per_head() -> None:
    model = tiny(layers={1: {"heads": {0: {"impl": "sdpa"}}}})
    with torch.autocast("cpu", dtype=torch.bfloat16), model.instrument() as record:
        model(torch.randint(0, 256, (2, 32)))
    layer1 = record.stats_dict()["1"]["softmax_sum_bias"]
    assert layer1[0] is None  # sdpa head: its backward recomputes nothing from an lse
    # fa2's fp32 ℓ: fp32 rounding only (under autocast the check's own q·kᵀ must stay fp32)
    assert all(v is not None and abs(v) < 1e-5 for v in layer1[1:]), layer1


def test_capture_layer_out_of_range() -> None:
    with pytest.raises(FlashprobeError, match="capture layer 2 out of range"):
        with tiny().instrument(capture_layers=[2]):
            pass


def test_captured_x_is_the_c_attn_input_and_gives_the_weight_gradient_per_head() -> None:
    """dW_Q[h] = dq_hᵀX and dW_K[h] = dk_hᵀX (head h's B × T × D slice against the layer input)
    are exactly c_attn's weight-gradient rows of head h (fp32 math attention, one forward)."""
    from flashprobe.reference.golden import golden_backward

    model = tiny(attention="math")
    idx = torch.randint(0, 256, (2, 32))
    block = model.transformer.h[1]
    seen: list[torch.Tensor] = []
    hook = block.attn.c_attn.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    with model.instrument(stats=False, capture_layers=[1]) as record:
        _, loss = model(idx, idx)
        loss.backward()
    hook.remove()
    t = record.tensors
    x = t["layer1.x"]
    assert x.dtype == torch.float32 and torch.equal(x, seen[0].detach())
    gold = golden_backward(t["layer1.q"], t["layer1.k"], t["layer1.v"], t["layer1.do"],
                           causal=True, scale=0.25)  # fmt: skip
    grad, d, c = block.attn.c_attn.weight.grad.double(), 16, 64
    for h in range(4):
        dw_q = torch.einsum("btd,btc->dc", gold.dq[:, h], x.double())
        dw_k = torch.einsum("btd,btc->dc", gold.dk[:, h], x.double())
        torch.testing.assert_close(dw_q, grad[h * d : (h + 1) * d], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(dw_k, grad[c + h * d : c + (h + 1) * d], rtol=1e-4, atol=1e-7)


def test_captured_x_has_the_autocast_dtype_c_attn_consumes() -> None:
    model = tiny(attention="sdpa")
    idx = torch.randint(0, 256, (2, 32))
    with (
        torch.autocast("cpu", dtype=torch.bfloat16),
        model.instrument(stats=False, capture_layers=[0]) as record,
    ):
        model(idx)
    assert record.tensors["layer0.x"].dtype == torch.bfloat16
    assert record.tensors["layer0.x"].shape == (2, 32, 64)


def test_key_shift_leak_is_measured_in_backward_and_tiny_for_fp32_attention() -> None:
    """Σ_j dK_j is exactly 0; fp32 math attention leaves only fp32 rounding there."""
    model = tiny(attention="math")
    idx = torch.randint(0, 256, (2, 32))
    with model.instrument() as forward_only:
        model(idx)
    assert "key_shift_leak" not in forward_only.stats_dict()["0"]  # no backward, no gradient
    with model.instrument() as record:
        model(idx, idx)[1].backward()
        model(idx, idx)[1].backward()  # a second micro-batch pools into the same sums
    for layer in ("0", "1"):
        entry = record.stats_dict()[layer]
        assert len(entry["key_shift_leak"]) == 4 and len(entry["key_shift_drift"]) == 4
        assert all(0 <= x < 1e-5 for x in entry["key_shift_leak"])
        assert all(-1 <= x <= 1 for x in entry["key_shift_drift"])


def test_key_shift_leak_under_bf16_autocast_sits_at_the_bf16_floor_for_every_head_group() -> None:
    """Heads split over two attention implementations still report one leak per head; at init
    (small logits) every implementation is near bf16's rounding floor of dK (~2e-3)."""
    pytest.importorskip("flashprobe.api")
    model = tiny(layers={1: {"heads": {0: {"impl": "sdpa"}}}})
    with torch.autocast("cpu", dtype=torch.bfloat16), model.instrument() as record:
        model(torch.randint(0, 256, (2, 32)), torch.randint(0, 256, (2, 32)))[1].backward()
    leaks = record.stats_dict()["1"]["key_shift_leak"]
    assert len(leaks) == 4 and all(1e-4 < x < 2e-2 for x in leaks)


def test_gqa_stats_are_per_query_head_and_the_key_leak_per_key_value_head() -> None:
    """n_kv_head 2 of 4, layer 1 split so that head 0 runs alone (its own copy of key/value
    head 0): stats per query head, one key-shift leak per shared head, at bf16's floor."""
    pytest.importorskip("flashprobe.api")
    model = tiny(n_kv_head=2, layers={1: {"heads": {0: {"impl": "sdpa"}}}})
    idx = torch.randint(0, 256, (2, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16), model.instrument(capture_layers=[1]) as rec:
        model(idx, idx)[1].backward()
    for layer in ("0", "1"):
        entry = rec.stats_dict()[layer]
        assert len(entry["max_logit"]) == 4 and len(entry["p_bar_ones"]) == 4
        assert len(entry["key_shift_leak"]) == 2
        assert all(1e-4 < x < 2e-2 for x in entry["key_shift_leak"])
    q, k = rec.tensors["layer1.q"].float(), rec.tensors["layer1.k"].float()
    assert q.shape == (2, 4, 32, 16) and k.shape == (2, 2, 32, 16)
    scores = (q @ k.repeat_interleave(2, dim=1).transpose(-2, -1)) / 4.0
    scores = scores.masked_fill(torch.ones(32, 32, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(rec.tensors["layer1.lse"], scores.logsumexp(-1))


def test_key_grad_drift_of_a_shared_head_uses_its_group_mean_query() -> None:
    g = torch.Generator().manual_seed(0)
    dk, q = torch.randn(2, 2, 8, 4, generator=g), torch.randn(2, 4, 8, 4, generator=g)
    stats = KeyGradStats.from_grads(dk, q)
    leak = dk.sum(dim=2)  # [B, H_kv, D]
    q_mean = torch.stack([q[:, 2 * kv : 2 * kv + 2].mean(dim=(1, 2)) for kv in range(2)], dim=1)
    torch.testing.assert_close(stats.along, -(leak * q_mean).sum(dim=(0, 2)).double())
    torch.testing.assert_close(
        stats.lengths, (leak.norm(dim=-1) * q_mean.norm(dim=-1)).sum(dim=0).double()
    )
