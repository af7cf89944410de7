"""The reference emulator against the fp64 golden, and its step functions on hand-made inputs."""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.numerics.gate import (
    GATE_FLOORS,
    assert_gate,
    gate,
    reference_attention,
    reference_grads,
    rel_l2,
)
from flashprobe.reference.emulator import (
    LOG2E,
    ForwardResult,
    emulate_forward,
    online_softmax_forward,
    rounded_row_sum_floor,
    running_max,
    tile_max_and_ties,
    update,
)
from flashprobe.reference.emulator_backward import (
    BackwardResult,
    emulate_backward,
    softmax_sum_error_qk,
)
from flashprobe.reference.golden import golden_backward, golden_forward
from flashprobe.spec import PRESETS, KernelSpec, make_spec

BF16 = torch.bfloat16


def run(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    spec: KernelSpec,
    causal: bool,
) -> tuple[ForwardResult, BackwardResult]:
    fwd = emulate_forward(q, k, v, spec, causal=causal)
    bwd = emulate_backward(q, k, v, fwd.o, do, fwd.lse, spec, causal=causal, o_fp32=fwd.o_fp32)
    return fwd, bwd


def assert_all_within_gate(
    label: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    spec: KernelSpec,
    causal: bool,
) -> None:
    """Forward o, lse and all three gradients within the gate of docs (flashprobe.numerics.gate)."""
    fwd, bwd = run(q, k, v, do, spec, causal)
    gold = golden_forward(q, k, v, causal=causal)
    gold_grads = golden_backward(q, k, v, do, causal=causal)
    ref_o, ref_lse = reference_attention(q, k, v, causal=causal)
    ref_dq, ref_dk, ref_dv = reference_grads(q, k, v, do, causal=causal)
    assert fwd.o.dtype == q.dtype and bwd.dq.dtype == q.dtype
    for name, got, ref, want in [
        ("o", fwd.o, ref_o, gold.o),
        ("lse", fwd.lse, ref_lse, gold.lse),
        ("dq", bwd.dq, ref_dq, gold_grads.dq),
        ("dk", bwd.dk, ref_dk, gold_grads.dk),
        ("dv", bwd.dv, ref_dv, gold_grads.dv),
    ]:
        assert_gate(f"{label} {name}", got, ref, want, dtype=q.dtype)


# -- fp32 everywhere: the emulator is exact attention up to fp32 rounding --------------------
FP32_CASES = [  # (M, N, D, block_n, causal)
    (1, 17, 16, 16, False),
    (17, 17, 40, 16, True),
    (77, 77, 48, 32, False),
    (130, 130, 64, 64, True),
    (130, 130, 128, 16, False),
    (17, 77, 64, None, False),
    (77, 17, 16, 32, True),  # more queries than keys, causal: rows past N see every key
    (33, 33, 256, 16, True),
]


@pytest.mark.parametrize(("m", "n", "d", "block_n", "causal"), FP32_CASES)
def test_fp32_preset_matches_golden(
    make_qkv, m: int, n: int, d: int, block_n: int | None, causal: bool
) -> None:
    q, k, v, do = make_qkv(1, 2, m, n, d, torch.float32, seed=m + n + d)
    spec = PRESETS["fp32"].replace(block_n=block_n)
    assert_all_within_gate("fp32", q, k, v, do, spec, causal)
    fwd, bwd = run(q, k, v, do, spec, causal)
    gold = golden_forward(q, k, v, causal=causal)
    grads = golden_backward(q, k, v, do, causal=causal)
    pairs = [(fwd.o, gold.o), (fwd.lse, gold.lse), (bwd.delta, grads.delta)]
    pairs += [(bwd.dq, grads.dq), (bwd.dk, grads.dk), (bwd.dv, grads.dv)]
    for got, want in pairs:
        assert rel_l2(got, want) < 2e-6  # ~30 fp32 unit roundoffs


def test_single_key_gives_exact_output_and_zero_score_gradients(make_qkv) -> None:
    q, k, v, do = make_qkv(1, 2, 1, 1, 16, torch.float32)
    fwd, bwd = run(q, k, v, do, PRESETS["fp32"], causal=True)
    assert torch.equal(fwd.o, v)  # P = [1]: O is V exactly
    # dS = P(dP − δ) with δ = dP in exact arithmetic; fp32 leaves only summation-order noise.
    scale = (do.norm() * v.norm() * k.norm()).item()
    assert bwd.dq.abs().max().item() <= 1e-6 * scale
    assert bwd.dk.abs().max().item() <= 1e-6 * scale
    torch.testing.assert_close(bwd.dv, do)


# -- 16-bit presets: no worse than twice naive same-dtype attention ----------------------------
GATE_CASES = [  # (preset, overrides, dtype)
    ("fa2", {}, BF16),
    ("fa2", {"block_n": 16}, BF16),
    ("paper-code", {}, BF16),
    ("paper-code", {"block_n": 16}, BF16),  # several bf16 accumulator updates per row
    ("sfa", {"block_n": 32}, BF16),
    ("paper-sfa", {"block_n": 16}, BF16),
    ("fa2", {"softmax": "fused_scale"}, BF16),
    ("fa2", {"block_n": 16, "delta_source": "dp_p", "l_from_rounded_p": True}, BF16),
    ("fa2", {"block_n": 16}, torch.float16),
    ("paper-code", {"block_n": 32}, torch.float16),
]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("preset", "overrides", "dtype"), GATE_CASES)
def test_16bit_presets_within_gate(
    make_qkv, preset: str, overrides: dict, dtype: torch.dtype, causal: bool
) -> None:
    q, k, v, do = make_qkv(2, 2, 77, 77, 64, dtype, seed=3)
    spec = make_spec(preset, overrides)
    assert_all_within_gate(spec.describe(), q, k, v, do, spec, causal)


def test_gate_rejects_a_broken_kernel(make_qkv) -> None:
    """The gate can fail: P̄ rounded to fp8 instead of bf16, a wrong scale, or a NaN."""
    q, k, v, _ = make_qkv(2, 2, 77, 77, 64, BF16, seed=3)
    gold = golden_forward(q, k, v, causal=True)
    ref_o, _ = reference_attention(q, k, v, causal=True)
    s_raw = q.float() @ k.float().transpose(-2, -1)

    def forward(low: torch.dtype, scale: float) -> torch.Tensor:
        spec = PRESETS["fa2"]
        fwd = online_softmax_forward(
            s_raw, v.float(), spec, scale=scale, causal=True, low_dtype=low
        )
        return fwd.o.to(BF16)

    assert gate(forward(BF16, 0.125), ref_o, gold.o, dtype=BF16).passed
    assert not gate(forward(torch.float8_e4m3fn, 0.125), ref_o, gold.o, dtype=BF16).passed
    assert not gate(forward(BF16, 0.125 * 1.03), ref_o, gold.o, dtype=BF16).passed
    nan_o = forward(BF16, 0.125).clone()
    nan_o[0, 0, 5, 7] = math.nan
    assert not gate(nan_o, ref_o, gold.o, dtype=BF16).passed
    with pytest.raises(AssertionError, match="exceeds the gate"):
        assert_gate("nan", nan_o, ref_o, gold.o, dtype=BF16)
    assert GATE_FLOORS[BF16] < rel_l2(ref_o, gold.o)  # the floor never dominates here


# -- tiling ------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["fa2", "paper-code", "sfa"])
def test_untiled_is_one_tile(make_qkv, preset: str) -> None:
    q, k, v, _ = make_qkv(1, 2, 77, 77, 32, BF16, seed=1)
    untiled = emulate_forward(q, k, v, PRESETS[preset].replace(block_n=None), causal=True)
    one_tile = emulate_forward(q, k, v, PRESETS[preset].replace(block_n=128), causal=True)
    assert torch.equal(untiled.o, one_tile.o) and torch.equal(untiled.lse, one_tile.lse)
    assert torch.equal(untiled.stats.p_bar_ones, one_tile.stats.p_bar_ones)


def test_tiling_changes_only_rounding(make_qkv) -> None:
    q, k, v, _ = make_qkv(1, 2, 77, 77, 32, BF16, seed=2)
    specs = [PRESETS["fa2"].replace(block_n=bn) for bn in (None, 16, 32, 64)]
    outs = [emulate_forward(q, k, v, spec, causal=False).o_fp32 for spec in specs]
    for o in outs[1:]:
        assert 0 < rel_l2(o, outs[0]) < 2.0**-8  # bf16 P̄ differs per tiling, slightly


# -- every switch is live (and block_m is inert) --------------------------------------------
SWITCHES = [  # (field, value, outputs it must change)
    ("block_n", 16, ("o", "dq")),
    ("score_precision", "bf16", ("o", "lse", "dq")),
    ("softmax", "fused_scale", ("o_fp32", "lse")),  # ~1 fp32 ulp: bf16 O, dQ may not notice
    ("p_bar_precision", "fp32", ("o", "dv")),
    ("accumulator", "bf16", ("o", "lse")),
    ("l_from_rounded_p", True, ("o", "lse")),
    ("delta_source", "o_fp32", ("dq", "dk")),
    ("delta_source", "o_recompute", ("dq", "dk")),
    ("delta_source", "dp_p", ("dq", "dk")),
    ("delta_precision", "bf16", ("dq", "dk")),
    ("ds_precision", "fp32", ("dq", "dk")),
]


def outputs(spec: KernelSpec, qkv: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    fwd, bwd = run(*qkv, spec, causal=True)
    return {
        "o": fwd.o,
        "o_fp32": fwd.o_fp32,
        "lse": fwd.lse,
        "dq": bwd.dq,
        "dk": bwd.dk,
        "dv": bwd.dv,
    }


@pytest.mark.parametrize(("field", "value", "changed"), SWITCHES)
def test_every_switch_changes_what_it_rounds(make_qkv, field: str, value, changed) -> None:
    qkv = make_qkv(1, 2, 64, 64, 32, BF16, seed=6)
    base = outputs(PRESETS["fa2"], qkv)
    flipped = outputs(PRESETS["fa2"].replace(**{field: value}), qkv)
    for name in changed:
        assert not torch.equal(base[name], flipped[name]), name
    if field.startswith("delta") or field == "ds_precision":  # backward-only switches
        assert torch.equal(base["o"], flipped["o"]) and torch.equal(base["dv"], flipped["dv"])


def test_block_m_is_inert(make_qkv) -> None:
    qkv = make_qkv(1, 2, 64, 64, 32, BF16, seed=6)
    base = outputs(PRESETS["fa2"], qkv)
    for block_m in (16, 128, None):
        other = outputs(PRESETS["fa2"].replace(block_m=block_m), qkv)
        assert all(torch.equal(base[name], other[name]) for name in base)


# -- the stabilized softmax ------------------------------------------------------------------
def tied_scores(sign: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Unscaled scores [1,2,32,64] in which every key appears twice in a row (so every 16-wide
    tile row has a tied maximum), all of one sign; and a bf16-valued V."""
    gen = torch.Generator().manual_seed(seed)
    base = sign * (1.0 + 4.0 * torch.rand(1, 2, 32, 32, generator=gen))
    s_raw = base.repeat_interleave(2, dim=-1)
    v = torch.randn(1, 2, 64, 32, generator=gen).to(BF16).float()
    return s_raw, v


def tied_forward(spec: KernelSpec, sign: float) -> ForwardResult:
    s_raw, v = tied_scores(sign)
    return online_softmax_forward(s_raw, v, spec, scale=1.0, causal=False, low_dtype=BF16)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize(("standard", "stabilized"), [("fa2", "sfa"), ("paper-code", "paper-sfa")])
def test_stabilized_leaves_no_exact_ones(standard: str, stabilized: str, sign: float) -> None:
    std = tied_forward(PRESETS[standard].replace(block_n=16), sign)
    sfa = tied_forward(PRESETS[stabilized].replace(block_n=16), sign)
    tiles = 64 // 16
    assert (std.stats.tie_events == tiles).all() and (sfa.stats.tie_events == tiles).all()
    assert std.stats.p_bar_ones.sum() >= 2 * 64  # the first tile alone gives two ones per row
    assert sfa.stats.p_bar_ones.sum() == 0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_stabilized_and_standard_compute_the_same_softmax(sign: float) -> None:
    s_raw, v = tied_scores(sign)
    p = torch.softmax(s_raw.double(), dim=-1)
    gold_o, gold_lse = p @ v.double(), torch.logsumexp(s_raw.double(), dim=-1)
    # fp32 P̄: the shift cancels exactly up to fp32 rounding.
    fp32_p = {"p_bar_precision": "fp32", "block_n": 16}
    std = tied_forward(make_spec("fa2", fp32_p), sign)
    sfa = tied_forward(make_spec("sfa", fp32_p), sign)
    assert rel_l2(sfa.o_fp32, std.o_fp32.double()) < 1e-6
    assert rel_l2(sfa.lse, std.lse.double()) < 1e-6
    # bf16 P̄: both are bf16-accurate softmaxes.
    for preset in ("fa2", "sfa"):
        fwd = tied_forward(PRESETS[preset].replace(block_n=16), sign)
        assert rel_l2(fwd.o, gold_o) < 2.0**-8
        assert rel_l2(fwd.lse, gold_lse) < 1e-6


def test_running_max_rules() -> None:
    spec = PRESETS["sfa"].replace(beta=3.0)
    r = torch.tensor([3.0, -2.0, 0.0, 5.0, 4.0])
    ties = torch.tensor([2, 2, 3, 1, 2], dtype=torch.int32)
    m_old = torch.tensor([-math.inf, 1.0, -math.inf, 7.0, 20.0])
    assert running_max(m_old, r, ties, spec).tolist() == [9.0, 1.0, 0.0, 7.0, 20.0]
    assert running_max(m_old, r, ties, PRESETS["fa2"]).tolist() == [3.0, 1.0, 0.0, 7.0, 20.0]


def test_tie_counting_uses_the_natural_units_tolerance() -> None:
    spec = PRESETS["sfa"]  # tie_tolerance 1e-3 in natural units
    x = torch.tensor([[2.0, 2.0 - 0.9e-3 * LOG2E, 2.0 - 1.1e-3 * LOG2E, -math.inf]])
    keep = torch.tensor([[True, True, True, False]])
    r, ties = tile_max_and_ties(x, keep, spec)
    assert r.item() == 2.0 and ties.item() == 2
    _, ties = tile_max_and_ties(torch.full((1, 4), -math.inf), torch.zeros(1, 4, dtype=bool), spec)
    assert ties.item() == 0  # a fully masked tile row has no ties


# -- the other switches ----------------------------------------------------------------------
def test_fused_scale_max_entry_is_the_rounding_residual() -> None:
    # x = s·scale·LOG2E ≈ 43.4 is inexact in fp32; its residual (~1e-6) moves exp2 off 1.0.
    s_raw = torch.tensor([[[[100.3]]]])
    v = torch.ones(1, 1, 1, 16)
    spec = PRESETS["fp32"]
    std = online_softmax_forward(s_raw, v, spec, scale=0.3, causal=False, low_dtype=BF16)
    fused = online_softmax_forward(
        s_raw, v, spec.replace(softmax="fused_scale"), scale=0.3, causal=False, low_dtype=BF16
    )
    assert std.stats.p_bar_ones.item() == 1 and fused.stats.p_bar_ones.item() == 0
    bf16_p = spec.replace(softmax="fused_scale", p_bar_precision="bf16")
    fused_bf16 = online_softmax_forward(s_raw, v, bf16_p, scale=0.3, causal=False, low_dtype=BF16)
    assert fused_bf16.stats.p_bar_ones.item() == 1  # the residual is far below a bf16 ulp


def test_bf16_accumulator_rounds_each_update() -> None:
    """The paper's bias in one update: half a bf16 ulp rounds to even, a hair more rounds up."""
    spec = PRESETS["paper-code"]
    acc, l = torch.tensor([[1.0, 1.0]]), torch.tensor([1.0])  # noqa: E741
    alpha, l_tile = torch.tensor([1.0]), torch.tensor([1e-3])
    pv = torch.tensor([[2.0**-8, 2.0**-8 + 2.0**-12]])  # both bf16 values; ulp(1) = 2^-7
    acc_bf16, l_bf16 = update(acc, l, alpha, pv, l_tile, spec, BF16)
    acc_fp32, l_fp32 = update(acc, l, alpha, pv, l_tile, spec.replace(accumulator="fp32"), BF16)
    assert acc_fp32.tolist() == [[1.0 + 2.0**-8, 1.0 + 2.0**-8 + 2.0**-12]]
    assert l_fp32.item() == pytest.approx(1.001)
    assert acc_bf16.tolist() == [[1.0, 1.0 + 2.0**-7]] and l_bf16.item() == 1.0
    # l_accumulator splits the two: the paper's O with an fp32 ℓ, and FA2's O with a bf16 ℓ
    acc_split, l_split = update(acc, l, alpha, pv, l_tile, spec.replace(l_accumulator="fp32"), BF16)
    assert acc_split.tolist() == acc_bf16.tolist() and l_split.item() == pytest.approx(1.001)
    fa2_l16 = spec.replace(accumulator="fp32", l_accumulator="bf16")
    acc_split, l_split = update(acc, l, alpha, pv, l_tile, fa2_l16, BF16)
    assert acc_split.tolist() == acc_fp32.tolist() and l_split.item() == 1.0


def test_delta_sources_beat_the_rounded_output(make_qkv) -> None:
    """δ from fp32 O, from a recomputed O, or from dP∘P is closer to the fp64 δ than δ from the
    stored bf16 O (the paper's Cause 2 path), averaged over rows and seeds."""
    errors: dict[str, float] = {}
    for source in ("o_lowp", "o_fp32", "o_recompute", "dp_p"):
        total = 0.0
        for seed in range(3):
            q, k, v, do = make_qkv(2, 2, 64, 64, 64, BF16, seed=seed)
            spec = PRESETS["fa2"].replace(delta_source=source)
            _, bwd = run(q, k, v, do, spec, causal=True)
            gold = golden_backward(q, k, v, do, causal=True)
            total += (bwd.delta.double() - gold.delta).abs().mean().item()
        errors[source] = total
    for source in ("o_fp32", "o_recompute", "dp_p"):
        assert errors[source] < errors["o_lowp"], errors
    assert errors["o_recompute"] < 0.1 * errors["o_lowp"], errors  # P unrounded: fp32-accurate


def test_delta_o_fp32_needs_the_forward_o_fp32(make_qkv) -> None:
    from flashprobe.errors import FlashprobeError

    q, k, v, do = make_qkv(1, 1, 8, 8, 16, BF16)
    fwd = emulate_forward(q, k, v, PRESETS["fp32"], causal=True)
    with pytest.raises(FlashprobeError, match="o_fp32"):
        emulate_backward(q, k, v, fwd.o, do, fwd.lse, PRESETS["fp32"], causal=True)


# -- masking, stats and the synthetic-score entry point ------------------------------------------
def test_masked_tiles_and_empty_rows_give_no_nan() -> None:
    gen = torch.Generator().manual_seed(0)
    s_raw = torch.randn(1, 1, 4, 48, generator=gen) * 3
    s_raw[0, 0, 1, :16] = -math.inf  # first tile fully masked for row 1
    s_raw[0, 0, 2, 16:] = -math.inf  # only the first tile visible for row 2
    s_raw[0, 0, 3, :] = -math.inf  # nothing visible for row 3
    v = torch.randn(1, 1, 48, 16, generator=gen).to(BF16).float()
    spec = PRESETS["fp32"].replace(block_n=16)
    for softmax in ("standard", "stabilized", "fused_scale"):
        variant = spec.replace(softmax=softmax)
        fwd = online_softmax_forward(
            s_raw, v, variant, scale=1.0, causal=False, low_dtype=BF16, out_dtype=torch.float32
        )
        assert not fwd.o.isnan().any() and not fwd.lse.isnan().any()
        p = torch.softmax(s_raw[..., :3, :].double(), dim=-1)
        assert rel_l2(fwd.o[..., :3, :], p @ v.double()) < 2e-6
        assert (fwd.o[0, 0, 3] == 0).all() and fwd.lse[0, 0, 3].item() == -math.inf


def test_stats(make_qkv) -> None:
    q, k, v, _ = make_qkv(2, 2, 40, 64, 16, BF16, seed=5)
    fwd = emulate_forward(q, k, v, PRESETS["fa2"].replace(block_n=16), causal=True)
    stats = fwd.stats
    assert stats.lse is fwd.lse and stats.lse.dtype == torch.float32
    assert stats.tie_events.dtype == torch.int32 and stats.p_bar_ones.dtype == torch.int32
    assert stats.row_max.shape == (2, 2, 40)
    s = (q.double() @ k.double().transpose(-2, -1)) / 4.0
    s = s.masked_fill(torch.ones(40, 64, dtype=bool).triu(1), -math.inf)
    torch.testing.assert_close(stats.row_max.double(), s.amax(-1), rtol=1e-6, atol=1e-6)
    assert (stats.p_bar_ones >= 1).all() and (stats.tie_events >= 0).all()

    # With fp32 P̄ and no ties, P̄ = exp2(0) = 1 exactly once per tile that raises the row max.
    spec32 = PRESETS["fp32"].replace(block_n=16, tie_tolerance=0.0)  # exact ties only
    fwd32 = emulate_forward(q.float(), k.float(), v.float(), spec32, causal=False)
    s = (q.double() @ k.double().transpose(-2, -1)) / 4.0
    tile_max = s.unflatten(-1, (4, 16)).amax(-1)  # 64 keys: four tiles of 16
    raises = tile_max >= tile_max.cummax(-1).values
    assert torch.equal(fwd32.stats.p_bar_ones, raises.sum(-1).to(torch.int32))
    assert (fwd32.stats.tie_events == 0).all()


def test_online_softmax_forward_is_the_core_of_emulate_forward(make_qkv) -> None:
    q, k, v, _ = make_qkv(1, 2, 30, 50, 32, BF16, seed=4)
    spec = PRESETS["paper-sfa"].replace(block_n=16)
    fwd = emulate_forward(q, k, v, spec, causal=False, scale=0.2)
    s_raw = q.float() @ k.float().transpose(-2, -1)
    core = online_softmax_forward(s_raw, v.float(), spec, scale=0.2, causal=False, low_dtype=BF16)
    assert core.o.dtype == BF16
    assert torch.equal(core.o, fwd.o) and torch.equal(core.lse, fwd.lse)
    assert torch.equal(core.stats.tie_events, fwd.stats.tie_events)


@pytest.mark.gpu
def test_emulator_on_cuda_is_ieee_fp32(make_qkv) -> None:
    """Same code on CUDA; with TF32 the fp32 preset would be ~1e-3 off instead of ~1e-7."""
    if not torch.cuda.is_available():
        pytest.fail("the gpu marker needs a CUDA device")
    q, k, v, do = make_qkv(2, 2, 130, 130, 64, torch.float32, seed=7, device="cuda")
    fwd, bwd = run(q, k, v, do, PRESETS["fp32"], causal=True)
    gold = golden_forward(q, k, v, causal=True)
    grads = golden_backward(q, k, v, do, causal=True)
    for got, want in [(fwd.o, gold.o), (bwd.dq, grads.dq), (bwd.dk, grads.dk), (bwd.dv, grads.dv)]:
        assert got.is_cuda and rel_l2(got, want) < 2e-6
    qb, kb, vb, dob = (t.to(BF16) for t in (q, k, v, do))
    cpu = run(*(t.cpu() for t in (qb, kb, vb, dob)), PRESETS["fa2"], causal=True)
    gpu = run(qb, kb, vb, dob, PRESETS["fa2"], causal=True)
    assert rel_l2(gpu[0].o.cpu(), cpu[0].o.double()) < 2.0**-8
    assert rel_l2(gpu[1].dq.cpu(), cpu[1].dq.double()) < 2.0**-7


def test_stabilized_underflow_gives_nan_not_zero() -> None:
    """ℓ = 0 after every P̄ underflowed (tied logit 160, β = 2) must surface as NaN; a row with no
    visible key at all (all −inf scores) is the only one that reads as O = 0."""
    s_raw = torch.full((1, 1, 2, 32), 150.0)
    s_raw[0, 0, 0, 3] = s_raw[0, 0, 0, 8] = 160.0
    s_raw[0, 0, 1] = -math.inf
    v = torch.randn(1, 1, 32, 16).bfloat16().float()
    out = online_softmax_forward(
        s_raw, v, make_spec("sfa"), scale=1.0, causal=False, low_dtype=torch.bfloat16
    )
    assert torch.isnan(out.o_fp32[0, 0, 0]).all()
    assert (out.o_fp32[0, 0, 1] == 0).all() and out.lse[0, 0, 1] == -math.inf


# -- row_sum_floor: the released kernel's clamp of each tile's row sum -------------------------
#: Tied maxima of the crafted rows: 0 and 10 are ordinary for β 2, the rest shrink under the clamp.
TIED_MAXES = [0.0, 10.0, 20.0, 25.0, 30.0, 35.0, 40.0]


def o_ratio(o: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|O| / |exact O| per row."""
    return (o.double().norm(dim=-1) / exact.norm(dim=-1)).flatten()


def bf16_spacing(x: torch.Tensor) -> torch.Tensor:
    """The distance between neighbouring bf16 values at |x|."""
    return torch.exp2(torch.floor(torch.log2(x.double().abs())) - 7)


@pytest.mark.parametrize("block_n", [512, 32], ids=["one-tile", "two-tiles"])
@pytest.mark.parametrize("beta", [2.0, 7.0])
def test_row_sum_floor_shrinks_o_where_the_release_does(release, beta: float, block_n: int) -> None:
    """paper-sfa against the released code's own arithmetic on rows whose two tied maxima r
    shift to β·r: the tile's sum ≈ 2e^(−(β−1)r) falls below the clamp, which replaces it, so O
    shrinks by sum/1e-10 (to 0 once P̄ underflows: β 7) instead of staying exact or 0/0."""
    (q, k, v, _), exact = release.rows(TIED_MAXES)
    o_release, _ = release.forward(q, k, v, k_bucket_size=block_n, beta=beta)
    want = o_ratio(o_release, exact)
    spec = make_spec("paper-sfa", {"beta": beta, "block_n": block_n})
    got = o_ratio(emulate_forward(q, k, v, spec, causal=False).o, exact)

    assert torch.isfinite(got).all(), got
    shift = (beta - 1) * torch.tensor(TIED_MAXES, dtype=torch.float64)
    assert (want[shift >= 25] < 0.3).all() and (want[shift <= 20] > 0.97).all(), want
    released = want > 0
    assert (got[~released] == 0).all(), (got, want)  # every P̄ underflowed: O = 0, as released
    assert torch.allclose(got[released], want[released], rtol=0.02, atol=0), (got, want)

    # the clamp is what makes the difference: without it nothing shrinks, and β 7 is 0/0
    unclamped = o_ratio(
        emulate_forward(q, k, v, spec.replace(row_sum_floor=None), causal=False).o, exact
    )
    if beta == 2.0:
        assert torch.allclose(unclamped, torch.ones_like(unclamped), atol=0.01), unclamped
    else:
        assert torch.isnan(unclamped[shift >= 100]).all(), unclamped


@pytest.mark.parametrize("beta", [2.0, 7.0])
def test_row_sum_floor_lse_and_backward_use_the_clamped_sum(release, beta: float) -> None:
    """lse = m + log ℓ from the clamped ℓ, as the release computes it (there in bf16), so the
    backward's recomputed P sums to the same shrink factor as O, and gradients stay finite."""
    (q, k, v, do), exact = release.rows(TIED_MAXES)
    spec = make_spec("paper-sfa", {"beta": beta})
    _, lse_release = release.forward(q, k, v, k_bucket_size=512, beta=beta)
    fwd, bwd = run(q, k, v, do, spec, causal=False)

    lse_error = (fwd.lse.double() - lse_release.double()).abs()
    assert (lse_error <= bf16_spacing(lse_release)).all(), (fwd.lse, lse_release)
    p_sum = softmax_sum_error_qk(q, k, fwd.lse, spec, causal=False, scale=0.25).flatten() + 1
    shrink = o_ratio(fwd.o, exact)
    assert torch.allclose(p_sum.double(), shrink, rtol=0.01, atol=1e-6), (p_sum, shrink)
    assert all(torch.isfinite(g).all() for g in (bwd.dq, bwd.dk, bwd.dv))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_n", [16, 512])
def test_row_sum_floor_leaves_ordinary_rows_bit_identical(make_qkv, causal, block_n) -> None:
    """On random scores every tile's sum is far above 1e-10 (or, past the max, far below ℓ's
    last bit): paper-sfa with and without the clamp give the same bits."""
    q, k, v, do = make_qkv(2, 2, 77, 77, 64, BF16, seed=3)
    spec = make_spec("paper-sfa", {"block_n": block_n})
    fwd, bwd = run(q, k, v, do, spec, causal)
    plain_fwd, plain_bwd = run(q, k, v, do, spec.replace(row_sum_floor=None), causal)
    assert torch.equal(fwd.o, plain_fwd.o) and torch.equal(fwd.lse, plain_fwd.lse)
    for name in ("dq", "dk", "dv"):
        assert torch.equal(getattr(bwd, name), getattr(plain_bwd, name)), name


# -- masked_tiles: causal key tiles wholly past a row, as the release runs them ----------------
#: Tied maxima of the causal rows (row i gets CAUSAL_MAXES[i % 8]): 5 and 10 shrink at β 7, 25+
#: at β 2 (20 and above underflow to O = 0 at β 7).
CAUSAL_MAXES = [0.0, 5.0, 10.0, 20.0, 25.0, 30.0, 35.0, 40.0]
RELEASE_TILE = 512  # model.py: q_bucket_size = k_bucket_size = 512


def released_causal(release, q, k, v, beta: float = 2.0, tile: int = RELEASE_TILE):
    """(o, lse) of the release in the inputs' dtype and o of its fp64 golden, causal. The
    release's bf16 lse is log ℓ and its sum with m each rounded: within two bf16 spacings."""
    kwargs = dict(k_bucket_size=tile, q_bucket_size=RELEASE_TILE, causal=True, beta=beta)
    o, lse = release.forward(q, k, v, **kwargs)
    golden, _ = release.forward(q.double(), k.double(), v.double(), **kwargs)
    return o, lse, golden


@pytest.mark.parametrize("n", [1024, 1000])
@pytest.mark.parametrize("beta", [2.0, 7.0])
def test_masked_tiles_release_matches_the_causal_release(release, beta: float, n: int) -> None:
    """Causal paper-sfa, 512-key tiles, rows whose tied maxima r (keys 3 and 17) shift to β·r.
    On rows 17-511 the first tile's sum sits at the floor; the release then runs the wholly
    masked second tile and adds one more floor to ℓ, halving O. masked_tiles = release passes
    the error gate row by row against the fp64 golden of the release's arithmetic and halves
    those rows as it does; skip leaves them twice as large and fails the same gate."""
    (q, k, v, _), _ = release.rows([CAUSAL_MAXES[i % 8] for i in range(n)], n=n)
    exact = release.causal_exact(q, k, v)
    o_release, lse_release, golden = released_causal(release, q, k, v, beta)
    spec = make_spec("paper-sfa", {"beta": beta})
    assert spec.masked_tiles == "release"
    fwd = emulate_forward(q, k, v, spec, causal=True)
    skip = emulate_forward(q, k, v, spec.replace(masked_tiles="skip"), causal=True)

    assert_gate("o", fwd.o, o_release, golden, dtype=BF16)
    passed = release.row_gate(fwd.o, o_release, golden)
    assert passed.all(), passed.logical_not().nonzero().flatten()
    assert ((fwd.lse - lse_release.float()).abs() <= 2 * bf16_spacing(lse_release)).all()

    rows = torch.arange(n)
    got, want, skipped = (o_ratio(o, exact) for o in (fwd.o, o_release, skip.o))
    shrunk = (rows >= 17) & (rows < RELEASE_TILE) & (want > 0) & (want < 0.3)
    assert shrunk.sum() > 100, want
    assert torch.allclose(got[shrunk], want[shrunk], rtol=0.02, atol=0), (got, want)
    assert torch.allclose(skipped[shrunk], 2 * want[shrunk], rtol=0.02, atol=0), skipped
    assert not release.row_gate(skip.o, o_release, golden)[shrunk].any()
    # no tile lies wholly past a row of the second query tile: the two modes agree bit for bit
    assert torch.equal(fwd.o[..., RELEASE_TILE:, :], skip.o[..., RELEASE_TILE:, :])
    # the backward's P (from lse) carries the same shrink
    p_sum = softmax_sum_error_qk(q, k, fwd.lse, spec, causal=True, scale=0.25).flatten() + 1
    assert torch.allclose(p_sum[shrunk].double(), got[shrunk], rtol=0.01, atol=1e-6)


@pytest.mark.parametrize(("n", "lifted"), [(1024, True), (513, False)])
def test_masked_tiles_release_lifts_a_negative_running_max_to_zero(
    release, n: int, lifted: bool
) -> None:
    """Rows whose one maximum logit is −26 (no tie of their own, so m = −26 and ℓ ≈ 1.9).
    The release's wholly masked second tile is all tied fill: m becomes 0, O and ℓ are rescaled
    by e^−26 and ℓ gains the floor, ≈ 10 times ℓ·e^−26, so rows 0-511 shrink to ≈ 0.09. A
    last tile of one key (n 513) cannot tie: m stays and only the floor, far below ℓ, is
    added."""
    q, k, v, _ = release.negative_rows(-26.0, n=n)
    exact = release.causal_exact(q, k, v)
    o_release, lse_release, golden = released_causal(release, q, k, v)
    spec = PRESETS["paper-sfa"]
    fwd = emulate_forward(q, k, v, spec, causal=True)
    skip = emulate_forward(q, k, v, spec.replace(masked_tiles="skip"), causal=True)

    assert_gate("o", fwd.o, o_release, golden, dtype=BF16)
    passed = release.row_gate(fwd.o, o_release, golden)
    assert passed.all(), passed.logical_not().nonzero().flatten()
    assert ((fwd.lse - lse_release.float()).abs() <= 2 * bf16_spacing(lse_release)).all()
    got, want = o_ratio(fwd.o, exact), o_ratio(o_release, exact)
    first = slice(0, RELEASE_TILE)
    if lifted:
        assert (want[first] < 0.2).all(), want
        assert torch.allclose(got[first], want[first], rtol=0.02, atol=0), (got, want)
        assert not release.row_gate(skip.o, o_release, golden)[first].any()
    else:
        assert torch.allclose(want, torch.ones_like(want), atol=0.01), want
        assert torch.equal(fwd.o, skip.o)


def test_masked_tiles_only_acts_causally_and_when_set(make_qkv) -> None:
    """Without causality no tile lies past a row; presets other than paper-sfa keep skip."""
    q, k, v, _ = make_qkv(1, 2, 77, 77, 32, BF16, seed=5)
    spec = PRESETS["paper-sfa"].replace(block_n=16)
    full = emulate_forward(q, k, v, spec, causal=False)
    assert torch.equal(full.o, emulate_forward(q, k, v, spec.replace(masked_tiles="skip"),
                                               causal=False).o)  # fmt: skip
    assert [n for n, p in PRESETS.items() if p.masked_tiles != "skip"] == ["paper-sfa"]


def test_row_sum_floor_is_rounded_to_the_input_dtype() -> None:
    """As `.clamp(min=1e-10)` on a bf16 tensor: bf16 holds 1.00044e-10, fp16 flushes it to 0."""
    spec = PRESETS["paper-sfa"]
    assert rounded_row_sum_floor(spec, BF16) == torch.tensor(1e-10).bfloat16().item()
    assert rounded_row_sum_floor(spec, torch.float16) is None
    assert rounded_row_sum_floor(PRESETS["paper-code"], BF16) is None


def test_row_sum_floor_turns_underflow_into_zero_not_nan() -> None:
    """The NaN case above (tied logit 160, every P̄ underflows) on paper-sfa: the released clamp
    makes ℓ = 1e-10, so O = 0 and lse = β·160 + log 1e-10, both finite."""
    s_raw = torch.full((1, 1, 1, 32), 150.0)
    s_raw[0, 0, 0, 3] = s_raw[0, 0, 0, 8] = 160.0
    v = torch.randn(1, 1, 32, 16).bfloat16().float()
    spec = make_spec("paper-sfa", {"score_precision": "fp32"})
    out = online_softmax_forward(s_raw, v, spec, scale=1.0, causal=False, low_dtype=BF16)
    assert (out.o_fp32 == 0).all()
    floor = torch.tensor(1e-10).bfloat16().double()
    assert out.lse.item() == pytest.approx(320 + torch.log(floor).item(), abs=1e-4)


# -- row_sum_bias: an injected softmax-sum bias (a probe, no released kernel) ------------------
@pytest.mark.parametrize("causal", [False, True])
def test_row_sum_bias_makes_the_recomputed_softmax_sum_to_one_plus_it(make_qkv, causal) -> None:
    q, k, v, do = make_qkv(1, 2, 77, 77, 32, BF16, seed=4)
    spec = make_spec("fa2", {"block_n": 16})
    biased = spec.replace(row_sum_bias=2e-3)
    fwd, _ = run(q, k, v, do, spec, causal)
    bias_fwd, bias_bwd = run(q, k, v, do, biased, causal)
    scale = 1.0 / math.sqrt(q.shape[-1])
    plain_sum = softmax_sum_error_qk(q, k, fwd.lse, spec, causal=causal, scale=scale)
    sum_error = softmax_sum_error_qk(q, k, bias_fwd.lse, biased, causal=causal, scale=scale)
    assert plain_sum.abs().max() < 1e-5
    assert torch.allclose(sum_error, torch.full_like(sum_error, 2e-3), atol=1e-5)
    # O before its rounding is 1 + bias times larger; lse smaller by log(1 + bias)
    assert torch.allclose(bias_fwd.o_fp32, fwd.o_fp32 * (1 + 2e-3), rtol=1e-6, atol=1e-7)
    assert torch.allclose(bias_fwd.lse, fwd.lse - math.log1p(2e-3), atol=1e-6)
    assert all(torch.isfinite(g).all() for g in (bias_bwd.dq, bias_bwd.dk, bias_bwd.dv))


def test_row_sum_bias_off_is_bit_identical_and_left_out_of_the_key(make_qkv) -> None:
    q, k, v, do = make_qkv(1, 1, 33, 33, 16, BF16, seed=5)
    spec = make_spec("paper-code", {"block_n": 16})
    assert spec.replace(row_sum_bias=0).key() == spec.key()  # stored cells keep their keys
    assert "row_sum_bias" not in spec.to_dict()
    fwd, bwd = run(q, k, v, do, spec.replace(row_sum_bias=0.0), True)
    plain_fwd, plain_bwd = run(q, k, v, do, spec, True)
    assert torch.equal(fwd.o, plain_fwd.o) and torch.equal(bwd.dq, plain_bwd.dq)
