"""The Triton kernels against the fp64 golden (error gate) and the emulator (same rounding points).

CPU cases run under Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py
before the kernels are imported); CUDA cases carry the `gpu` mark (`pytest -m gpu` on the H200).

Kernel vs emulator bound. Both follow docs/semantics.md step by step, so they differ only where
fp32 sums are added in another order (q·kᵀ, ℓ, P̄V, the backward's products) or exp2 differs
in its last bit (the GPU's ex2.approx against torch.exp2). Such a difference of a few fp32 ulps
moves a value across a 16-bit rounding boundary only rarely, and then by one 16-bit ulp: a
stored output by one ulp, or an intermediate (P̄, dS, a bf16 accumulator) whose one-ulp change
moves its row of o or of a gradient by at most about one ulp of the row's largest entry. So for
o, dq, dk and dv we require: at most `MAX_MISMATCH` of the elements differ at all, and each
differs by at most `MAX_ULPS` 16-bit ulps of its own value (`MAX_ULPS_BF16_ACC` with bf16
accumulators, whose flips carry into later tiles) plus `FLIP_SLACK` ulps of its row's largest
entry. A wrong rounding point moves most elements, so the mismatch fraction catches it.
lse, δ: fp32 values, |Δ| ≤ 1e-5·(1 + |x|) (2⁻⁷ where bf16 scores, accumulators or δ round).
"""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.kernels import launch, triton_attention
from flashprobe.kernels.tuning import BwdConfig, FwdConfig, atomic_dq_heuristic
from flashprobe.numerics.gate import (
    assert_gate,
    reference_attention,
    reference_grads,
)
from flashprobe.reference.emulator import emulate_forward
from flashprobe.reference.emulator_backward import emulate_backward, softmax_sum_error_qk
from flashprobe.reference.golden import golden_backward, golden_forward
from flashprobe.spec import PRESETS, KernelSpec, make_spec

INTERPRETED = launch.interpreting()
HAVE_GPU = torch.cuda.is_available() and not INTERPRETED

DEVICES = [
    pytest.param(
        "cpu", marks=pytest.mark.skipif(not INTERPRETED, reason="needs TRITON_INTERPRET=1")
    ),
    pytest.param(
        "cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="no GPU")]
    ),
]
MAX_MISMATCH = 0.05
MAX_ULPS = 1.0
MAX_ULPS_BF16_ACC = 4.0
FLIP_SLACK = 2.0


def sizes(device: str) -> dict[str, int]:
    """Small problems for the interpreter, GPU-sized ones (several key tiles) on CUDA."""
    if device == "cpu":
        return {"b": 1, "h": 2, "m": 70, "n": 70, "d": 32}
    return {"b": 2, "h": 3, "m": 1000, "n": 1000, "d": 64}


def qkv_do(b, h, m, n, d, dtype, device, seed=0, kv_heads=None):
    gen = torch.Generator().manual_seed(seed)
    hk = h if kv_heads is None else kv_heads
    shapes = [(b, h, m, d), (b, hk, n, d), (b, hk, n, d), (b, h, m, d)]
    return [torch.randn(s, generator=gen).to(device=device, dtype=dtype) for s in shapes]


def run_kernel(q, k, v, do, spec, causal, scale=None, dq_accumulation="ordered"):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o, stats = triton_attention(*leaves, causal=causal, spec=spec, scale=scale, return_stats=True,
                                dq_accumulation=dq_accumulation)  # fmt: skip
    dq, dk, dv = torch.autograd.grad(o, leaves, do)
    return o.detach(), stats, dq, dk, dv


def assert_close_to_emulator(name: str, got: torch.Tensor, want: torch.Tensor, ulps: float) -> None:
    """At most MAX_MISMATCH of the elements differ; none by more than `ulps` 16-bit ulps of the
    emulator's value plus FLIP_SLACK ulps of the largest value of its row."""
    assert got.dtype == want.dtype and got.shape == want.shape, name
    assert bool(torch.isfinite(got).all()), f"{name}: non-finite values"
    g, w = got.double(), want.double()
    diff = (g - w).abs()
    mantissa = 7 if want.dtype == torch.bfloat16 else 10
    tiny = w.abs().max().clamp_min(1e-30) * 2.0**-30
    ulp = torch.exp2(torch.floor(torch.log2(w.abs().clamp_min(tiny))) - mantissa)
    # Rows whose exact value is ~0 (dq of a causal row that sees one key) keep only rounding
    # noise: measure them against the tensor's mean magnitude instead.
    row_scale = w.abs().amax(-1, keepdim=True).clamp_min(w.abs().mean().item())
    row_ulp = torch.exp2(torch.floor(torch.log2(row_scale.clamp_min(tiny))))
    allowed = ulps * ulp + FLIP_SLACK * row_ulp * 2.0**-mantissa
    worst = (diff / allowed).max().item()
    frac = (diff > 0).double().mean().item()
    assert worst <= 1.0, f"{name}: {worst:.2f} × the allowed difference from the emulator"
    assert frac <= MAX_MISMATCH, f"{name}: {frac:.2%} of elements differ from the emulator"


def assert_fp32_close(name: str, got: torch.Tensor, want: torch.Tensor, atol: float) -> None:
    assert bool(torch.isfinite(got).all()), f"{name}: non-finite values"
    err = ((got.double() - want.double()).abs() / (1 + want.double().abs())).max().item()
    assert err <= atol, f"{name}: {err:.2e} from the emulator"


# -- golden gate ------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_within_gate_of_golden(device: str, preset: str, causal: bool) -> None:
    sz = sizes(device)
    q, k, v, do = qkv_do(**sz, dtype=torch.bfloat16, device=device, seed=1)
    check_gate(q, k, v, do, make_spec(preset), causal)


def random_spec(rng: torch.Generator) -> KernelSpec:
    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=rng))]

    score = pick(["fp32", "bf16"])
    softmax = pick(["standard", "stabilized"] + (["fused_scale"] if score == "fp32" else []))
    return make_spec(
        "fa2",
        {
            "block_n": pick([16, 32, 64, 128, 256, None]),
            "score_precision": score,
            "softmax": softmax,
            "beta": pick([2.0, 4.0, 8.0]),
            "p_bar_precision": pick(["bf16", "fp32"]),
            "accumulator": pick(["fp32", "bf16"]),
            "l_accumulator": pick([None, None, "fp32", "bf16"]),
            "l_from_rounded_p": pick([False, True]),
            "delta_source": pick(["o_lowp", "o_fp32", "o_recompute", "dp_p"]),
            "delta_precision": pick(["fp32", "bf16"]),
            "ds_precision": pick(["bf16", "fp32"]),
        },
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_and_switches_within_gate(device: str, seed: int) -> None:
    rng = torch.Generator().manual_seed(seed)
    spec = random_spec(rng)
    causal = bool(seed % 2)
    dtype = torch.float16 if seed % 3 == 2 else torch.bfloat16
    if device == "cpu":
        m, n = (int(x) for x in torch.randint(1, 90, (2,), generator=rng))
        d = [16, 32, 64][seed % 3]
        b, h = 1 + seed % 2, 1 + (seed // 2) % 2
    else:
        m, n = (int(x) for x in torch.randint(1, 2500, (2,), generator=rng))
        d = [32, 64, 128, 256][seed % 4]
        b, h = 1 + seed % 2, 3
    kv_heads = 1 if causal else h  # the causal seeds share one key/value head (MQA when h > 1)
    q, k, v, do = qkv_do(b, h, m, n, d, dtype, device, seed=seed, kv_heads=kv_heads)
    label = f"{spec.describe()} M{m} N{n} D{d} H{h}/{kv_heads} {dtype}"
    check_gate(q, k, v, do, spec, causal, label=label)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("preset", ["fa2", "sfa", "fp32"])
def test_key_shift_leak_within_gate_of_the_pytorch_reference(
    device: str, preset: str, causal: bool
) -> None:
    """Σ_j dK_j is exactly 0 (softmax ignores a common shift of a row's scores). A kernel with
    fp32 running accumulators leaks no more there than plain bf16 PyTorch attention: at most 2×
    its leak plus 1e-3, about what bf16 rounding of dK alone leaves."""
    from flashprobe.attribution.mechanism import key_shift_leak

    q, k, v, do = qkv_do(**sizes(device), dtype=torch.bfloat16, device=device, seed=1)
    dk = run_kernel(q, k, v, do, make_spec(preset), causal)[3]
    dk_ref = reference_grads(q, k, v, do, causal=causal)[1]
    leak, ref = key_shift_leak(dk, q)[0], key_shift_leak(dk_ref, q)[0]
    assert math.isfinite(leak) and leak <= 2 * ref + 1e-3, f"leak {leak:.2e}, reference {ref:.2e}"


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no GPU")
def test_wide_key_tiles_at_head_dim_256_step_down_to_fit_shared_memory() -> None:
    """d 256 with 128-key tiles ran out of shared memory (288 KB with two K/V stages against an
    H200's 227 KB); its heuristic config now has one stage, which the launch retry also picks.
    (fp32 P̄, 384 KB with two stages, is not repeated: d 256 variants are slow to compile.)"""
    q, k, v, do = qkv_do(1, 2, 600, 600, 256, torch.bfloat16, "cuda", seed=5)
    spec = make_spec("fa2", {"block_n": 128})
    check_gate(q, k, v, do, spec, causal=True, label="d256 bn128")


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no GPU")
def test_a_relaunch_matches_the_first_launch() -> None:
    """Later calls of a compiled variant skip JITFunction.run (kernels.fastlaunch): they must
    compute the same bits, and inputs at a 2-byte offset (no 16-byte alignment) must get a
    kernel compiled for them, with the same results."""
    spec = make_spec("sfa")
    q, k, v, do = qkv_do(2, 3, 300, 300, 64, torch.bfloat16, "cuda", seed=7)
    first = run_kernel(q, k, v, do, spec, True)
    again = run_kernel(q, k, v, do, spec, True)
    compiled = len(launch._FORWARD.compiled), len(launch._BACKWARD.compiled)

    def misaligned(t: torch.Tensor) -> torch.Tensor:
        buffer = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = buffer[1:].view(t.shape)
        view.copy_(t)
        return view.requires_grad_()

    leaves = [misaligned(t) for t in (q, k, v)]
    assert leaves[0].data_ptr() % 16 != 0
    o, stats = triton_attention(*leaves, causal=True, spec=spec, return_stats=True)
    shifted = (o.detach(), stats, *torch.autograd.grad(o, leaves, do))
    assert len(launch._FORWARD.compiled) > compiled[0]
    assert len(launch._BACKWARD.compiled) > compiled[1]
    for other in (again, shifted):
        for name, a, b in zip(("o", "stats", "dq", "dk", "dv"), first, other, strict=True):
            if name == "stats":
                for field in ("lse", "row_max", "tie_events", "p_bar_ones"):
                    assert torch.equal(getattr(a, field), getattr(b, field)), field
            else:
                assert torch.equal(a, b), name


def check_gate(q, k, v, do, spec, causal, label="", dq_accumulation="ordered"):
    o, stats, dq, dk, dv = run_kernel(q, k, v, do, spec, causal, dq_accumulation=dq_accumulation)
    gold = golden_forward(q, k, v, causal=causal)
    gold_grads = golden_backward(q, k, v, do, causal=causal)
    ref_o, ref_lse = reference_attention(q, k, v, causal=causal)
    ref_grads = reference_grads(q, k, v, do, causal=causal)
    delta = kernel_delta(q, k, v, do, spec, causal)
    ref_delta = (do * ref_o).sum(-1)  # same-dtype PyTorch: a 16-bit δ from the 16-bit O
    checks = [
        ("o", o, ref_o, gold.o),
        ("lse", stats.lse, ref_lse, gold.lse),
        ("delta", delta, ref_delta, gold_grads.delta),
        ("dq", dq, ref_grads[0], gold_grads.dq),
        ("dk", dk, ref_grads[1], gold_grads.dk),
        ("dv", dv, ref_grads[2], gold_grads.dv),
    ]
    for name, got, ref, want in checks:
        assert_gate(f"{label} {name}", got, ref, want, dtype=q.dtype)


def kernel_delta(q, k, v, do, spec, causal, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = launch.attention_forward(
        q, k, v, causal=causal, spec=spec, scale=scale, keep_o_fp32=spec.delta_source == "o_fp32"
    )
    return launch.attention_delta(
        q,
        k,
        v,
        out.o,
        out.lse,
        do.contiguous(),
        causal=causal,
        spec=spec,
        scale=scale,
        o_fp32=out.o_fp32,
    )


# -- emulator: same rounding points -----------------------------------------------------------
EMULATOR_SPECS = {
    **{name: PRESETS[name] for name in PRESETS},
    "fused_scale": make_spec("fa2", {"softmax": "fused_scale"}),
    "untiled": make_spec("fa2", {"block_n": None}),
    "bn16-bf16scores": make_spec("fa2", {"block_n": 16, "score_precision": "bf16"}),
    "bn128-stab-beta8": make_spec("sfa", {"block_n": 128, "beta": 8.0}),
    "l-rounded-acc16": make_spec("fa2", {"l_from_rounded_p": True, "accumulator": "bf16"}),
    "paper-code-l32": make_spec("paper-code", {"block_n": 16, "l_accumulator": "fp32"}),
    "fa2-l16": make_spec("fa2", {"block_n": 16, "l_accumulator": "bf16"}),
    "fa2-score-l16": make_spec("fa2", {"score_precision": "bf16", "l_accumulator": "bf16"}),
    "dp_p-bf16delta": make_spec("fa2", {"delta_source": "dp_p", "delta_precision": "bf16"}),
    "o_recompute-p32": make_spec("fa2", {"delta_source": "o_recompute", "p_bar_precision": "fp32"}),
    "o_fp32-ds32": make_spec("fa2", {"delta_source": "o_fp32", "ds_precision": "fp32"}),
    "row-sum-bias": make_spec("fa2", {"row_sum_bias": 0.01, "delta_source": "o_fp32"}),
    "score16-row-sum-bias": make_spec("fa2", {"score_precision": "bf16", "row_sum_bias": 2e-4}),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", list(EMULATOR_SPECS))
def test_matches_emulator(device: str, name: str, causal: bool) -> None:
    spec = EMULATOR_SPECS[name]
    sz = sizes(device)
    q, k, v, do = qkv_do(**sz, dtype=torch.bfloat16, device=device, seed=2)
    o, stats, dq, dk, dv = run_kernel(q, k, v, do, spec, causal)
    emu = emulate_forward(q, k, v, spec, causal=causal)
    acc16 = spec.accumulator == "bf16" or spec.l_precision == "bf16"
    assert_close_to_emulator("o", o, emu.o, MAX_ULPS_BF16_ACC if acc16 else MAX_ULPS)
    # A bf16 score (or ℓ) that rounds the other way moves lse by up to ~2⁻⁸ of that entry's share.
    coarse = acc16 or spec.score_precision == "bf16"
    assert_fp32_close("lse", stats.lse, emu.lse, 2.0**-7 if coarse else 1e-5)
    assert_fp32_close("row_max", stats.row_max, emu.stats.row_max, 1e-5)
    # Ties compare fp32 scores with a threshold: a score within an fp32 ulp of it may count on
    # one side only, so allow a handful of rows to differ.
    ties_diff = (stats.tie_events - emu.stats.tie_events.to(stats.tie_events.dtype)).abs()
    assert ties_diff.sum().item() <= 1e-3 * ties_diff.numel() + 2
    # P̄ == 1 depends on the exact fp32 x − m: the count may move where a sum order differs.
    ones_diff = (stats.p_bar_ones - emu.stats.p_bar_ones.to(stats.p_bar_ones.dtype)).abs()
    assert ones_diff.sum().item() <= 0.01 * emu.stats.p_bar_ones.sum().item() + 2
    # Backward from the kernel's own forward outputs, so only the backward is compared.
    o32 = None
    if spec.delta_source == "o_fp32":
        out = launch.attention_forward(
            q, k, v, causal=causal, spec=spec, scale=default_scale(q), keep_o_fp32=True
        )
        assert torch.equal(out.o, o)
        o32 = out.o_fp32
    emu_b = emulate_backward(q, k, v, o, do, stats.lse, spec, causal=causal, o_fp32=o32)
    delta = launch.attention_delta(
        q, k, v, o, stats.lse, do, causal=causal, spec=spec, scale=default_scale(q), o_fp32=o32
    )
    delta_tol = 2.0**-7 if spec.delta_precision == "bf16" else 1e-5
    assert_fp32_close("delta", delta, emu_b.delta, delta_tol)
    # ΣP − 1 of the same P (instrumented training's check): fp32 sums in another order, and
    # with bf16 scores an entry whose score rounds the other way (as for lse above).
    sum_error = launch.softmax_sum_error(q, k, stats.lse, causal=causal, spec=spec,
                                         scale=default_scale(q))  # fmt: skip
    want = softmax_sum_error_qk(q, k, stats.lse, spec, causal=causal, scale=default_scale(q))
    assert_fp32_close(
        "ΣP − 1", sum_error, want, 2.0**-7 if spec.score_precision == "bf16" else 1e-5
    )
    for grad_name, got, want in (("dq", dq, emu_b.dq), ("dk", dk, emu_b.dk), ("dv", dv, emu_b.dv)):
        assert_close_to_emulator(grad_name, got, want, MAX_ULPS)


def default_scale(q: torch.Tensor) -> float:
    return 1.0 / math.sqrt(q.shape[-1])


@pytest.mark.parametrize("device", DEVICES)
def test_two_pass_equals_one_pass(device: str) -> None:
    """A 64-key logical tile run as two 32-key sub-tiles equals the one-pass tile."""
    sz = sizes(device)
    q, k, v, _ = qkv_do(**sz, dtype=torch.bfloat16, device=device, seed=3)
    spec = make_spec("paper-sfa", {"block_n": 64})
    scale = default_scale(q)
    outs = []
    for max_one_pass in (64, 32):
        config = FwdConfig(
            block_m=16 if device == "cpu" else 64,
            sub_n=32,
            num_warps=4,
            num_stages=1 if device == "cpu" else 2,
            max_one_pass=max_one_pass,
        )
        outs.append(
            launch.attention_forward(
                q, k, v, causal=True, spec=spec, scale=scale, instrument=True, config=config
            )
        )
    assert_close_to_emulator("o", outs[1].o, outs[0].o, MAX_ULPS_BF16_ACC)
    assert torch.equal(outs[0].stats.tie_events, outs[1].stats.tie_events)
    assert torch.equal(outs[0].stats.row_max, outs[1].stats.row_max)


# -- tensor-descriptor (TMA) loads -------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("preset", "causal"), [("fa2", False), ("paper-code", True), ("sfa", True)]
)  # one pass; 512-key logical tiles in two passes; the tie test
def test_tma_loads_compute_the_same_bits_as_pointer_loads(
    device: str, preset: str, causal: bool
) -> None:
    """The `tma` launch choice reads the same tiles through tensor descriptors: outputs, stats
    and gradients (dQ ordered and atomic) bit for bit those of pointer loads, on strided,
    grouped K and V of a length that is no multiple of the tiles (the descriptor's zero fill
    stands in for the mask past N)."""
    sz = sizes(device)
    b, h, m, d = sz["b"], 4, sz["m"] - 3, sz["d"]
    gen = torch.Generator().manual_seed(11)
    q, do = (torch.randn(b, h, m, d, generator=gen).to(device, torch.bfloat16) for _ in "qo")
    kv = torch.randn(b, m, 2, 2, d, generator=gen).to(device, torch.bfloat16)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)  # 2 heads, strided
    assert launch.tma_loads_fit(q, k, v, do)
    spec, scale = make_spec(preset), default_scale(q)
    cpu = device == "cpu"
    runs = []
    for tma in (False, True):
        fwd_config = FwdConfig(16 if cpu else 64, 32 if cpu else 64, 4, 1 if cpu else 2,
                               max_one_pass=64 if cpu else 128, tma=tma)  # fmt: skip
        out = launch.attention_forward(q, k, v, causal=causal, spec=spec, scale=scale,
                                       instrument=True, config=fwd_config)  # fmt: skip
        grads = []
        for accumulation in ("ordered", "atomic"):
            blocks = (16, 32, 32, 16) if accumulation == "ordered" else (16, 32, 16, 32)
            bwd_config = BwdConfig(*blocks, num_warps=4, num_stages=1 if cpu else 2, tma=tma)
            grads += launch.attention_backward(
                q, k, v, out.o, out.lse, do, causal=causal, spec=spec, scale=scale,
                config=bwd_config, dq_accumulation=accumulation,
            )  # fmt: skip
        runs.append((out, grads))
    (pointer, pointer_grads), (tma, tma_grads) = runs
    assert torch.equal(pointer.o, tma.o)
    for field in ("lse", "row_max", "tie_events", "p_bar_ones"):
        assert torch.equal(getattr(pointer.stats, field), getattr(tma.stats, field)), field
    names = ["dq", "dk", "dv", "atomic dq", "dk (atomic run)", "dv (atomic run)"]
    for name, a, b_ in zip(names, pointer_grads, tma_grads, strict=True):
        if name == "atomic dq" and not cpu:  # fp32 atomics add in a different order each run
            torch.testing.assert_close(a, b_, rtol=2**-7, atol=1e-5, msg=name)
        else:
            assert torch.equal(a, b_), name
    gold = golden_forward(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), causal=causal)
    ref_o, _ = reference_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                   causal=causal)  # fmt: skip
    assert_gate("tma o", tma.o, ref_o, gold.o, dtype=q.dtype)


# -- grouped-query attention ------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    ("kv_heads", "preset", "delta_source"),
    [(2, "fa2", "o_recompute"), (1, "sfa", "dp_p")],  # the δ sources that read K and V
    ids=["gqa", "mqa"],
)
def test_grouped_query_attention(
    device: str, causal: bool, kv_heads: int, preset: str, delta_source: str
) -> None:
    """k, v with fewer heads than q. Each query head's forward, lse, stats, ΣP − 1 and dQ are
    bit for bit those of the same kernel on repeated k, v (the same tiles, read from the shared
    head). dK, dV sum the group's query heads' fp32 gradients and round once, as the emulator
    does (compared to it like every kernel gradient); and everything is within the gate."""
    sz = sizes(device)
    b, h, m, n, d = sz["b"], 4, sz["m"] - 9, sz["n"] - 14, sz["d"]
    q, k, v, do = qkv_do(b, h, m, n, d, torch.bfloat16, device, seed=8, kv_heads=kv_heads)
    spec = make_spec(preset, {"delta_source": delta_source})
    o, stats, dq, dk, dv = run_kernel(q, k, v, do, spec, causal)
    group = h // kv_heads
    k_all, v_all = (t.repeat_interleave(group, dim=1) for t in (k, v))
    o_all, stats_all, dq_all, *_ = run_kernel(q, k_all, v_all, do, spec, causal)
    assert dk.shape == k.shape and dv.shape == v.shape
    assert torch.equal(o, o_all) and torch.equal(dq, dq_all)
    for field in ("lse", "row_max", "tie_events", "p_bar_ones"):
        assert torch.equal(getattr(stats, field), getattr(stats_all, field)), field
    sum_error = [
        launch.softmax_sum_error(q, kk, stats.lse, causal=causal, spec=spec, scale=default_scale(q))
        for kk in (k, k_all)
    ]
    assert torch.equal(*sum_error)
    emu_b = emulate_backward(q, k, v, o, do, stats.lse, spec, causal=causal)
    assert_close_to_emulator("dk", dk, emu_b.dk, MAX_ULPS)
    assert_close_to_emulator("dv", dv, emu_b.dv, MAX_ULPS)
    check_gate(q, k, v, do, spec, causal, label=f"H{h}/{kv_heads}")


# -- stabilized softmax on tied maxima --------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("base", ["fa2", "paper-code"])
def test_stabilized_leaves_no_p_bar_one_on_ties(device: str, base: str) -> None:
    sz = sizes(device)
    q, k, v, do = qkv_do(**sz, dtype=torch.bfloat16, device=device, seed=4)
    k[:, :, 1::2] = k[:, :, 0:-1:2]  # every key twice in a row: each tile's row max is tied
    standard = make_spec(base)
    stabilized = standard.replace(softmax="stabilized")
    o_std, st_std, *_ = run_kernel(q, k, v, do, standard, causal=False)
    o_stab, st_stab, *grads = run_kernel(q, k, v, do, stabilized, causal=False)
    n_tiles = math.ceil(sz["n"] / (standard.block_n or sz["n"]))
    assert bool((st_std.tie_events == n_tiles).all()), "every (row, tile) should be tied"
    assert bool((st_std.p_bar_ones >= 1).all())
    assert int(st_stab.p_bar_ones.sum()) == 0
    assert torch.equal(st_stab.tie_events, st_std.tie_events)
    # Same softmax up to rounding: both within the gate, and close to each other.
    gold = golden_forward(q, k, v, causal=False)
    ref_o, _ = reference_attention(q, k, v, causal=False)
    assert_gate("stabilized o", o_stab, ref_o, gold.o, dtype=q.dtype)
    assert (o_stab.double() - o_std.double()).norm() <= 0.02 * o_std.double().norm()
    assert torch.allclose(st_stab.lse, st_std.lse, atol=1e-2)
    assert all(bool(torch.isfinite(g).all()) for g in grads)


# -- layout, masks, errors --------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs_give_the_same_result(device: str) -> None:
    sz = sizes(device)
    b, h, m, d = sz["b"], sz["h"], sz["m"], sz["d"]
    gen = torch.Generator().manual_seed(5)
    qkv = torch.randn(b, m, 3, h, d, generator=gen).to(device=device, dtype=torch.bfloat16)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [B, H, M, D] strided views
    assert not q.is_contiguous()
    do = torch.randn(b, h, m, d, generator=gen).to(device=device, dtype=torch.bfloat16)
    spec = make_spec("sfa")
    strided = run_kernel(q, k, v, do.transpose(-1, -2).contiguous().transpose(-1, -2), spec, True)
    packed = run_kernel(q.contiguous(), k.contiguous(), v.contiguous(), do, spec, True)
    for a, b_ in zip(strided[:1] + strided[2:], packed[:1] + packed[2:], strict=True):
        assert torch.equal(a, b_)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("m", "n"), [(1, 17), (37, 5), (16, 100)])
def test_ragged_lengths_causal(device: str, m: int, n: int) -> None:
    q, k, v, do = qkv_do(1, 2, m, n, 32, torch.bfloat16, device, seed=m + n)
    check_gate(q, k, v, do, PRESETS["fa2"], causal=True, label=f"M{m} N{n}")


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic(device: str) -> None:
    sz = sizes(device)
    q, k, v, do = qkv_do(**sz, dtype=torch.bfloat16, device=device, seed=6)
    first = run_kernel(q, k, v, do, PRESETS["fa2"], True)
    second = run_kernel(q, k, v, do, PRESETS["fa2"], True)
    for a, b in zip(first[2:], second[2:], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_a_second_derivative_is_refused_not_silently_zero(device: str) -> None:
    """The kernels' backward is not itself differentiated: a gradient penalty through it must
    fail loudly (as the emulator's does), not drop the term."""
    q, k, v, _ = qkv_do(1, 2, 16, 16, 32, torch.bfloat16, device, seed=9)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o = triton_attention(*leaves, causal=False, spec=make_spec("fa2"))
    (dq,) = torch.autograd.grad(o.float().pow(2).sum(), leaves[0], create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        dq.float().pow(2).sum().backward()


@pytest.mark.parametrize(
    ("shape", "dtype", "scale", "match"),
    [
        ((1, 1, 8, 48), torch.bfloat16, None, "head_dim"),
        ((1, 1, 8, 32), torch.float32, None, "bf16 or fp16"),
        ((1, 1, 8, 32), torch.bfloat16, -1.0, "scale"),
        ((1, 8, 32), torch.bfloat16, None, "4-D"),
    ],
)
def test_bad_inputs_raise(shape: tuple[int, ...], dtype: torch.dtype, scale, match: str) -> None:
    q = torch.randn(shape).to(dtype)
    with pytest.raises(FlashprobeError, match=match):
        triton_attention(q, q, q, causal=False, spec="fa2", scale=scale)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("preset", "overrides", "released"),
    [("sfa", {}, False), ("paper-sfa", {"row_sum_floor": None}, False), ("paper-sfa", {}, True)],
    ids=["sfa", "paper-sfa-unclamped", "paper-sfa"],
)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the 0/0 tested
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")  # log2(ℓ = 0)
def test_stabilized_underflow_like_the_emulator(
    device: str, preset: str, overrides: dict, released: bool
) -> None:
    """A tied max logit of 160 shifted to β·160: every P̄ underflows and ℓ = 0. Without a row
    sum floor, O = 0/0: the kernel and the emulator must both say NaN (paper §4: too large a β
    underflows). paper-sfa clamps ℓ at 1e-10 as the released code does, so both give O = 0.
    The standard kernel on the same rows stays finite."""
    d, n = 32, 64
    scale = 1.0 / math.sqrt(d)
    scores = torch.linspace(150.0, 159.0, n)
    scores[5] = scores[9] = 160.0
    q = torch.zeros(1, 1, 1, d)
    q[..., 0] = 8.0
    k = torch.zeros(1, 1, n, d)
    k[0, 0, :, 0] = scores / (8.0 * scale)
    v = torch.randn(1, 1, n, d) - 2.5
    q, k, v = (t.to(device=device, dtype=torch.bfloat16) for t in (q, k, v))

    spec = make_spec(preset, overrides)
    o_kernel = triton_attention(q, k, v, causal=False, spec=spec, scale=scale)
    o_emulator = emulate_forward(q, k, v, spec, causal=False, scale=scale).o
    if released:
        assert (o_kernel == 0).all() and (o_emulator == 0).all()
    else:
        assert torch.isnan(o_kernel).all() and torch.isnan(o_emulator).all()
    standard = make_spec(preset, {"softmax": "standard"})
    assert torch.isfinite(triton_attention(q, k, v, causal=False, spec=standard, scale=scale)).all()


# -- row_sum_floor: the released kernel's clamp of each tile's row sum --------------------------
TIED_MAXES = [0.0, 10.0, 20.0, 25.0, 30.0, 35.0, 40.0]  # as tests/reference/test_emulator.py


def o_ratio(o: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|O| / |exact O| per row."""
    return (o.double().cpu().norm(dim=-1) / exact.norm(dim=-1)).flatten()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block_n", [512, 32], ids=["one-tile", "two-tiles"])
@pytest.mark.parametrize("beta", [2.0, 7.0])
def test_row_sum_floor_shrinks_o_like_the_release_and_the_emulator(
    release, device: str, beta: float, block_n: int
) -> None:
    """paper-sfa's kernel on rows whose two tied maxima r shift to β·r: O shrinks where the
    released code's clamp shrinks it (0 once P̄ underflows), equals the emulator, and the
    backward (from the clamped lse) stays finite and equals the emulator's. 512-key tiles run
    as two passes over sub-tiles, 32-key ones in one pass."""
    (q, k, v, do), exact = release.rows(TIED_MAXES)
    o_release, _ = release.forward(q, k, v, k_bucket_size=block_n, beta=beta)
    want = o_ratio(o_release, exact)
    spec = make_spec("paper-sfa", {"beta": beta, "block_n": block_n})
    q, k, v, do = (t.to(device) for t in (q, k, v, do))
    o, stats, dq, dk, dv = run_kernel(q, k, v, do, spec, causal=False)
    got = o_ratio(o, exact)

    assert torch.isfinite(got).all(), got
    released = want > 0
    assert (got[~released] == 0).all(), (got, want)
    assert torch.allclose(got[released], want[released], rtol=0.02, atol=0), (got, want)
    shift = (beta - 1) * torch.tensor(TIED_MAXES, dtype=torch.float64)
    assert (got[shift >= 25] < 0.3).all(), got

    emu = emulate_forward(q, k, v, spec, causal=False)
    assert_close_to_emulator("o", o, emu.o, MAX_ULPS_BF16_ACC)
    assert_fp32_close("lse", stats.lse, emu.lse, 2.0**-7)
    emu_b = emulate_backward(q, k, v, o, do, stats.lse, spec, causal=False)
    for grad_name, got_grad, want_grad in (("dq", dq, emu_b.dq), ("dk", dk, emu_b.dk),
                                           ("dv", dv, emu_b.dv)):  # fmt: skip
        assert_close_to_emulator(grad_name, got_grad, want_grad, MAX_ULPS)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("block_n", [16, 512])
def test_row_sum_floor_leaves_ordinary_rows_bit_identical(
    device: str, causal: bool, block_n: int
) -> None:
    """On random scores paper-sfa's kernel gives the same bits with and without the clamp."""
    q, k, v, do = qkv_do(**sizes(device), dtype=torch.bfloat16, device=device, seed=4)
    spec = make_spec("paper-sfa", {"block_n": block_n})
    clamped = run_kernel(q, k, v, do, spec, causal)
    plain = run_kernel(q, k, v, do, spec.replace(row_sum_floor=None), causal)
    assert torch.equal(clamped[1].lse, plain[1].lse)
    for name, a, b in zip(("o", "dq", "dk", "dv"), (clamped[0], *clamped[2:]),
                          (plain[0], *plain[2:]), strict=True):  # fmt: skip
        assert torch.equal(a, b), name


def test_only_paper_sfa_compiles_the_clamp() -> None:
    """The clamp is a constexpr: 0.0 (compiled out) for every other preset and for fp16 inputs,
    where 1e-10 rounds to 0 as it does in the release's fp16 clamp."""
    switches = {
        name: launch.forward_switches(spec, instrument=False, keep_o_fp32=False)["ROW_SUM_FLOOR"]
        for name, spec in PRESETS.items()
    }
    assert switches == {name: 0.0 for name in PRESETS} | {
        "paper-sfa": torch.tensor(1e-10).bfloat16().item()
    }
    released = {
        name: launch.forward_switches(spec, instrument=False, keep_o_fp32=False)["RELEASE_MASKED"]
        for name, spec in PRESETS.items()
    }
    assert released == {name: name == "paper-sfa" for name in PRESETS}
    fp16 = launch.forward_switches(
        PRESETS["paper-sfa"], instrument=False, keep_o_fp32=False, dtype=torch.float16
    )
    assert fp16["ROW_SUM_FLOOR"] == 0.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("masked_tiles", ["skip", "release"])
@pytest.mark.parametrize("max_one_pass", [64, 16], ids=["one-pass", "two-pass"])
def test_row_sum_floor_on_key_tiles_a_row_cannot_see(
    release, device: str, max_one_pass: int, masked_tiles: str
) -> None:
    """Causal, 64-row query tiles, 32-key tiles: rows 17-31 tie (keys 3 and 17) in the first
    tile and see nothing of the second, which the kernel visits for rows 32-63. skip: the clamp
    must skip that tile for them; release: it adds one more 1e-10 to ℓ, halving their shrunken
    O, though the key loop skipped it; as the emulator does either way."""
    (q, k, v, _), _ = release.rows([30.0] * 64)
    q, k, v = (t.to(device) for t in (q, k, v))
    spec = make_spec("paper-sfa", {"block_n": 32, "masked_tiles": masked_tiles})
    config = FwdConfig(block_m=64, sub_n=16, num_warps=4, num_stages=1, max_one_pass=max_one_pass)
    out = launch.attention_forward(
        q, k, v, causal=True, spec=spec, scale=default_scale(q), config=config
    )
    emu = emulate_forward(q, k, v, spec, causal=True)
    assert_close_to_emulator("o", out.o, emu.o, MAX_ULPS_BF16_ACC)
    assert_fp32_close("lse", out.lse, emu.lse, 2.0**-7)


# -- masked_tiles: causal key tiles wholly past a row, as the release runs them -----------------
CAUSAL_MAXES = [0.0, 5.0, 10.0, 20.0, 25.0, 30.0, 35.0, 40.0]  # as tests/reference


def released_causal(release, q, k, v, tile: int, beta: float = 2.0):
    """(o, lse) of the release in bf16 and o of its fp64 golden, causal, 512-query tiles."""
    kwargs = dict(k_bucket_size=tile, q_bucket_size=512, causal=True, beta=beta)
    o, lse = release.forward(q, k, v, **kwargs)
    golden, _ = release.forward(q.double(), k.double(), v.double(), **kwargs)
    return o, lse, golden


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("n", "block_n", "beta"),
    [(1024, 512, 2.0), (1000, 512, 7.0), (200, 32, 2.0), (200, 32, 7.0)],
    ids=["1024-two-pass-b2", "1000-two-pass-b7", "200-one-pass-b2", "200-one-pass-b7"],
)
def test_masked_tiles_release_like_the_release_and_the_emulator(
    release, device: str, n: int, block_n: int, beta: float
) -> None:
    """Causal paper-sfa on rows whose tied maxima shift to β·r (tests/reference's rows): the
    kernel applies the tiles wholly past each row after its key loop, and must equal the
    emulator, pass the error gate row by row against the fp64 golden of the release, and shrink
    the floor-bound rows as the release does (halved per such tile); skip fails that gate.
    Where it is cheap under the interpreter (n 200) the backward, which recomputes P from the
    kernel's lse, must equal the emulator's too."""
    (q, k, v, do), _ = release.rows([CAUSAL_MAXES[i % 8] for i in range(n)], n=n)
    exact = release.causal_exact(q, k, v)
    o_release, _, golden = released_causal(release, q, k, v, block_n, beta)
    spec = make_spec("paper-sfa", {"beta": beta, "block_n": block_n})
    q, k, v, do = (t.to(device) for t in (q, k, v, do))
    emu = emulate_forward(q, k, v, spec, causal=True)
    if n < 512:
        o, stats, dq, dk, dv = run_kernel(q, k, v, do, spec, causal=True)
        lse = stats.lse
        emu_b = emulate_backward(q, k, v, o, do, lse, spec, causal=True)
        for grad_name, got_grad, want_grad in (("dq", dq, emu_b.dq), ("dk", dk, emu_b.dk),
                                               ("dv", dv, emu_b.dv)):  # fmt: skip
            assert_close_to_emulator(grad_name, got_grad, want_grad, MAX_ULPS)
    else:  # forward only: the interpreter's backward at n 1024 would take minutes
        out = launch.attention_forward(q, k, v, causal=True, spec=spec, scale=0.25)
        o, lse = out.o, out.lse
    assert_close_to_emulator("o", o, emu.o, MAX_ULPS_BF16_ACC)
    assert_fp32_close("lse", lse, emu.lse, 2.0**-7)

    o = o.cpu()
    assert_gate("o", o, o_release, golden, dtype=torch.bfloat16)
    passed = release.row_gate(o, o_release, golden)
    assert passed.all(), passed.logical_not().nonzero().flatten()
    got, want = o_ratio(o, exact), o_ratio(o_release, exact)
    rows = torch.arange(n)
    shrunk = (rows >= 17) & (rows < n - block_n) & (want > 0) & (want < 0.3)
    assert shrunk.sum() > 10, want
    assert torch.allclose(got[shrunk], want[shrunk], rtol=0.02, atol=0), (got, want)
    if n < 512:  # the kernel with the switch off (cheap here): O too large, fails the gate
        skip = launch.attention_forward(
            q, k, v, causal=True, spec=spec.replace(masked_tiles="skip"), scale=0.25
        )
        assert not release.row_gate(skip.o.cpu(), o_release, golden)[shrunk].any()
        # every tile of a shrunk row adds one floor: ℓ counts all tiles, or only those it sees
        tiles = -(-n // block_n)
        share = tiles / (rows // block_n + 1).double()
        skipped = o_ratio(skip.o, exact)
        assert torch.allclose(skipped[shrunk], share[shrunk] * want[shrunk], rtol=0.02, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_masked_tiles_release_lifts_negative_rows(release, device: str) -> None:
    """193 keys in 32-key tiles: rows with one maximum at −26 have their running max lifted to
    0 by the first wholly masked tile (rows < 160, shrunk to ≈ 0.09 as ℓ·e^−26 falls below
    the floor); rows 160-191 have only the last, one-key tile past them, which cannot tie, so
    they keep m and equal skip bit for bit. As the emulator and the release."""
    q, k, v, _ = release.negative_rows(-26.0, n=193)
    exact = release.causal_exact(q, k, v)
    o_release, _, golden = released_causal(release, q, k, v, 32)
    spec = make_spec("paper-sfa", {"block_n": 32})
    q, k, v = (t.to(device) for t in (q, k, v))
    out = launch.attention_forward(q, k, v, causal=True, spec=spec, scale=0.25)
    o = out.o
    emu = emulate_forward(q, k, v, spec, causal=True)
    assert_close_to_emulator("o", o, emu.o, MAX_ULPS_BF16_ACC)
    assert_fp32_close("lse", out.lse, emu.lse, 2.0**-7)
    passed = release.row_gate(o.cpu(), o_release, golden)
    assert passed.all(), passed.logical_not().nonzero().flatten()
    got, want = o_ratio(o, exact), o_ratio(o_release, exact)
    lifted = slice(0, 160)
    assert (want[lifted] < 0.2).all(), want
    assert torch.allclose(got[lifted], want[lifted], rtol=0.02, atol=0), (got, want)
    skip = launch.attention_forward(
        q, k, v, causal=True, spec=spec.replace(masked_tiles="skip"), scale=0.25
    )
    assert torch.equal(o[..., 160:192, :], skip.o[..., 160:192, :])
    assert not release.row_gate(skip.o.cpu(), o_release, golden)[lifted].any()


# -- atomic dQ (the launch option dq_accumulation="atomic") -----------------------------------
#: (M, N, head_dim, causal, heads, kv_heads, ds_precision, dtype): lengths that are no multiple
#: of any tile, so the last key block holds padding keys and the last query block padding rows.
ATOMIC_CASES = {
    "gqa-causal-d64-ds16": (50, 37, 64, True, 4, 2, "bf16", torch.bfloat16),
    "mqa-full-d64-ds32": (37, 61, 64, False, 2, 1, "fp32", torch.bfloat16),
    "mha-full-d32-ds16-fp16": (45, 70, 32, False, 2, 2, "bf16", torch.float16),
    "mha-causal-d16-ds32": (90, 90, 16, True, 2, 2, "fp32", torch.bfloat16),
}


def backward_both_ways(q, k, v, do, spec, causal, config=None):
    """(dq, dk, dv) of the ordered and of the atomic backward on one forward's outputs."""
    scale = default_scale(q)
    keep = spec.delta_source == "o_fp32"
    fwd = launch.attention_forward(q, k, v, causal=causal, spec=spec, scale=scale,
                                   keep_o_fp32=keep)  # fmt: skip
    kw = {"causal": causal, "spec": spec, "scale": scale, "o_fp32": fwd.o_fp32, "config": config}
    return [
        launch.attention_backward(q, k, v, fwd.o, fwd.lse, do, dq_accumulation=how, **kw)
        for how in ("ordered", "atomic")
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(ATOMIC_CASES))
def test_atomic_dq_matches_the_ordered_backward_and_the_gate(device: str, case: str) -> None:
    """dQ summed with atomics differs from the ordered dQ only by the order of its fp32
    additions (bounded as kernel vs emulator, through autograd); dK and dV, whose loop is the
    same on the same tiles, are bit for bit the ordered ones; all three within the gate. With
    dS rounded (ds16) and not (ds32), causal and not, grouped heads and not, bf16 and fp16."""
    m, n, d, causal, heads, kv_heads, ds, dtype = ATOMIC_CASES[case]
    q, k, v, do = qkv_do(1, heads, m, n, d, dtype, device, seed=11, kv_heads=kv_heads)
    spec = make_spec("fa2", {"ds_precision": ds})
    ordered = run_kernel(q, k, v, do, spec, causal)
    atomic = run_kernel(q, k, v, do, spec, causal, dq_accumulation="atomic")
    assert torch.equal(atomic[0], ordered[0])  # the forward is the same
    if device == "cpu":  # one config for both paths (the interpreter's)
        assert torch.equal(atomic[3], ordered[3]) and torch.equal(atomic[4], ordered[4])
    assert_close_to_emulator("atomic dq vs ordered", atomic[2], ordered[2], MAX_ULPS)
    check_gate(q, k, v, do, spec, causal, label=case, dq_accumulation="atomic")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul:RuntimeWarning")
def test_atomic_dq_ignores_padding_keys_when_lse_is_very_negative(device: str) -> None:
    """Every score near −360: lse < −88, so P of a padding key (K row 0, score 0) is
    exp(360) = inf, and its inf·0 in dS·K would be NaN. N = 40 is no multiple of the key block:
    the atomic path masks those keys (KEY_MASK) and its dQ is the ordered one's. (The inf also
    reaches the padding rows of dK and dV, which are never stored: the interpreter warns.)"""
    gen = torch.Generator().manual_seed(13)
    q = (8 + 0.5 * torch.randn(1, 2, 24, 32, generator=gen)).to(device, torch.bfloat16)
    k = (-8 + 0.5 * torch.randn(1, 2, 40, 32, generator=gen)).to(device, torch.bfloat16)
    v, do = (torch.randn(s, generator=gen).to(device, torch.bfloat16) for s in (k.shape, q.shape))
    spec = make_spec("fa2")
    lse = launch.attention_forward(q, k, v, causal=False, spec=spec, scale=default_scale(q)).lse
    assert float(lse.max()) < -88
    ordered, atomic = backward_both_ways(q, k, v, do, spec, causal=False)
    dq, dq_atomic = ordered[0], atomic[0]
    assert bool(torch.isfinite(dq).all()) and bool(torch.isfinite(dq_atomic).all())
    assert_close_to_emulator("atomic dq vs ordered", dq_atomic, dq, MAX_ULPS)


def test_an_unknown_dq_accumulation_is_refused() -> None:
    q, k, v, _ = qkv_do(1, 1, 8, 8, 16, torch.bfloat16, "cpu")
    with pytest.raises(FlashprobeError, match="dq_accumulation must be one of ordered, atomic"):
        triton_attention(q, k, v, causal=True, dq_accumulation="fast")


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_GPU, reason="no GPU")
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("preset", ["fa2", "fp32"])
def test_atomic_dq_on_a_training_sized_shape(head_dim: int, causal: bool, preset: str) -> None:
    """B2, 8 query heads on 2 key/value heads, N 2000 (no multiple of the 128-key blocks), on
    the atomic path's heuristic tiles: the ordered backward on the same tiles gives dK, dV bit
    for bit and dQ within fp32 reordering; a second atomic run is within that bound of the
    first; with the default launch configs all three are within the gate."""
    q, k, v, do = qkv_do(2, 8, 2000, 2000, head_dim, torch.bfloat16, "cuda", seed=12, kv_heads=2)
    spec = make_spec(preset)
    config = atomic_dq_heuristic(head_dim, preset == "fp32")
    ordered, atomic = backward_both_ways(q, k, v, do, spec, causal, config=config)
    assert torch.equal(atomic[1], ordered[1]) and torch.equal(atomic[2], ordered[2])
    assert_close_to_emulator("atomic dq vs ordered", atomic[0], ordered[0], MAX_ULPS)
    again = backward_both_ways(q, k, v, do, spec, causal, config=config)[1]
    assert_close_to_emulator("atomic dq run to run", again[0], atomic[0], MAX_ULPS)
    check_gate(q, k, v, do, spec, causal, label=f"atomic d{head_dim}", dq_accumulation="atomic")
