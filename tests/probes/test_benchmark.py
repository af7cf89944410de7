"""Benchmark harness logic that does not need a GPU (timing itself runs on the H200)."""

from __future__ import annotations

import sys

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.probes import benchmark as bench


def test_flops_follow_the_tutorial_formula() -> None:
    shape = bench.BenchShape(batch=2, heads=16, seq=1024, head_dim=64, causal=False)
    dense = 4 * 2 * 16 * 1024 * 1024 * 64
    assert shape.flops("fwd") == dense
    assert shape.flops("bwd") == 2.5 * dense
    assert shape.flops("fwd+bwd") == 3.5 * dense
    causal = bench.BenchShape(batch=2, heads=16, seq=1024, head_dim=64, causal=True)
    assert causal.flops("fwd") == dense / 2


def test_default_shapes_keep_tokens_constant() -> None:
    shapes = bench.default_shapes()
    assert len(shapes) == 5 * 2 * 2
    assert {s.batch * s.seq for s in shapes} == {32768}
    assert {s.heads for s in shapes} == {16}


def test_grouped_query_shapes_share_key_value_heads() -> None:
    shapes = bench.default_shapes(seqs=(1024,), heads=16, kv_heads=4)
    assert {(s.heads, s.kv_heads, s.grouped) for s in shapes} == {(16, 4, True)}
    assert shapes[0].label() == "B32 H16/4 N1024 D64 causal"
    assert not bench.BenchShape(1, 16, 128, 64, True, kv_heads=16).grouped
    with pytest.raises(FlashprobeError, match="kv heads must divide the 16 heads, got 3"):
        bench.default_shapes(seqs=(1024,), kv_heads=3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"head_dims": (0,)}, "--head-dim must be at least 1, got 0"),  # it blamed the seq
        ({"heads": 0}, "--heads must be at least 1, got 0"),
        ({"heads": 0, "kv_heads": 4}, "--heads must be at least 1, got 0"),
        ({"seqs": (0,)}, "need tokens >= seq > 0"),
    ],
)
def test_default_shapes_name_the_bad_flag(kwargs: dict, message: str) -> None:
    with pytest.raises(FlashprobeError, match=message):
        bench.default_shapes(**{"seqs": (1024,), **kwargs})


def test_implementations_add_instrumented_base_and_peers() -> None:
    impls = bench.implementations(["fa2", "sfa"], instrumented=True, peers=True)
    assert [i.name for i in impls] == [
        "fa2", "sfa", "fa2+stats", "sdpa-flash", "sdpa-cudnn", "flash-attn-2", "flash-attn-3"
    ]  # fmt: skip
    assert [i.flash_attn for i in impls[-2:]] == [2, 3]
    assert {i.layout for i in impls[:-2]} == {"bhnd"} and impls[-1].layout == "bnhd"
    assert impls[2].instrument and impls[2].spec == impls[0].spec


def test_dq_both_times_each_preset_ordered_and_with_atomic_dq() -> None:
    impls = bench.implementations(["fa2", "sfa"], instrumented=True, peers=False, dq="both")
    assert [(i.name, i.dq_accumulation) for i in impls] == [
        ("fa2", "ordered"), ("fa2+atomic-dq", "atomic"), ("sfa", "ordered"),
        ("sfa+atomic-dq", "atomic"), ("fa2+stats", "ordered"),
    ]  # fmt: skip
    assert impls[1].spec == impls[0].spec
    atomic_only = bench.implementations(["fa2"], instrumented=True, peers=False, dq="atomic")
    assert [(i.name, i.dq_accumulation) for i in atomic_only] == [
        ("fa2+atomic-dq", "atomic"), ("fa2+atomic-dq+stats", "atomic")
    ]  # fmt: skip
    with pytest.raises(FlashprobeError, match="--dq must be one of ordered, atomic, both"):
        bench.implementations(["fa2"], instrumented=False, peers=False, dq="fast")


def test_the_kernels_are_called_with_each_implementations_dq_accumulation(monkeypatch) -> None:
    """Through the Triton entry point (interpreted on the CPU), each implementation's
    backward gets its own dq_accumulation."""
    from flashprobe.kernels import autograd, launch

    if not launch.interpreting():
        pytest.skip("a CPU test of the interpreted kernels; on CUDA they are compiled (gpu tests)")
    seen = []

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs["dq_accumulation"])
        return launch.attention_backward(*args, **kwargs)

    monkeypatch.setattr(autograd, "attention_backward", spy)
    shape = bench.BenchShape(1, 2, 40, 16, True)
    impls = bench.implementations(["fa2"], instrumented=False, peers=False, dq="both")
    timings = bench.run_benchmark([shape], impls, ["bwd"], device="cpu", timer=_count_steps([]))
    assert [(t.impl, t.ms) for t in timings] == [("fa2", 1.0), ("fa2+atomic-dq", 1.0)]
    assert seen == ["ordered", "atomic"]


def test_ratio_table_divides_by_the_baseline() -> None:
    shape = bench.BenchShape(1, 1, 128, 64, True)
    timings = [
        bench.Timing(shape, "fa2", "fwd", 1.0, 300.0),
        bench.Timing(shape, "sdpa-flash", "fwd", 1.2, 250.0),
        bench.Timing(shape, "sdpa-cudnn", "fwd", None, None, "not built"),
    ]
    ratios = bench.ratio_table(timings, "sdpa-flash")
    assert ratios[(shape, "fa2", "fwd")] == pytest.approx(1.2)
    assert bench.ratio_table(timings, "sdpa-cudnn")[(shape, "fa2", "fwd")] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error path")
def test_cpu_only_machine_gets_a_clear_error() -> None:
    with pytest.raises(FlashprobeError, match="needs a CUDA GPU"):
        bench.run_benchmark(bench.default_shapes(seqs=(1024,)), [], ["fwd"])


def test_unknown_mode_and_zero_repeats_are_refused_before_any_gpu_work() -> None:
    shapes = bench.default_shapes(seqs=(1024,))
    with pytest.raises(FlashprobeError, match="unknown mode"):
        bench.run_benchmark(shapes, [], ["forward"])
    with pytest.raises(FlashprobeError, match="repeats must be at least 1"):
        bench.run_benchmark(shapes, [], ["fwd"], repeats=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="times kernels on a CUDA GPU")
def test_round_robin_rounds_keep_every_sample_and_report_their_median() -> None:
    shape = bench.BenchShape(batch=1, heads=2, seq=256, head_dim=64, causal=True)
    impls = bench.implementations(["fa2"], instrumented=True, peers=False)
    timings = bench.run_benchmark([shape], impls, ["fwd", "bwd"], repeats=3)
    assert [(t.impl, t.mode) for t in timings] == [
        ("fa2", "fwd"), ("fa2", "bwd"), ("fa2+stats", "fwd")
    ]  # fmt: skip
    for t in timings:
        assert len(t.samples) == 3 and t.ms == sorted(t.samples)[1]
        assert t.tflops == pytest.approx(shape.flops(t.mode) / t.ms * 1e-9)
        assert t.to_dict()["samples_ms"] == list(t.samples)


def _count_steps(calls: list[int]):
    """A timer for the CPU: runs the step once (so it must work) and reports 1 ms."""

    def timer(step) -> float:
        step()
        calls.append(1)
        return 1.0

    return timer


def test_peers_run_on_cpu_in_their_layout_and_the_rest_get_one_line(fake_flash_attn) -> None:
    """The whole run with fake FlashAttention: FA2 gets [B, N, H, D] copies and dO, FA3's
    (out, lse) is unwrapped, a library refusal (forward or backward) becomes "unsupported: ...",
    cuDNN (not on the CPU) too, and the run goes on to the next shape."""
    fake_flash_attn.refuse = lambda gen, q: "headdim 48 not built" if q.shape[-1] == 48 else None
    fake_flash_attn.refuse_backward = lambda gen, q: "no bwd at d32" if q.shape[-1] == 32 else None
    d16 = bench.BenchShape(2, 4, 24, 16, True, kv_heads=2)
    d48 = bench.BenchShape(1, 2, 16, 48, False)
    d32 = bench.BenchShape(1, 2, 16, 32, False)
    impls = bench.implementations([], instrumented=False, peers=True)
    timed: list[int] = []
    timings = bench.run_benchmark(
        [d16, d48, d32], impls, bench.MODES, repeats=2, device="cpu", timer=_count_steps(timed)
    )
    by = {(t.shape, t.impl, t.mode): t for t in timings}
    assert len(by) == len(timings) == 3 * 4 * 3
    for mode in bench.MODES:
        for name in ("flash-attn-2", "flash-attn-3"):
            ran = by[(d16, name, mode)]
            assert ran.ms == 1.0 and ran.samples == (1.0, 1.0) and ran.note == ""
            assert ran.tflops == pytest.approx(d16.flops(mode) / 1.0 * 1e-9)
            assert by[(d48, name, mode)].note == "unsupported: headdim 48 not built"
        assert by[(d16, "sdpa-cudnn", mode)].note.startswith("unsupported: ")
        assert by[(d16, "sdpa-cudnn", mode)].ms is None
    assert by[(d32, "flash-attn-2", "fwd")].ms == 1.0
    for mode in ("bwd", "fwd+bwd"):
        assert by[(d32, "flash-attn-2", mode)].note == "unsupported: no bwd at d32"
    # every forward saw contiguous [B, N, H, D] inputs, every backward a [B, N, H, D] dO
    assert {(shape, contiguous) for _, shape, contiguous, _, _ in fake_flash_attn.calls} == {
        ((2, 24, 4, 16), True), ((1, 16, 2, 48), True), ((1, 16, 2, 32), True)
    }  # fmt: skip
    assert {shape for _, shape in fake_flash_attn.grads} == {(2, 24, 4, 16), (1, 16, 2, 32)}
    assert len(timed) == sum(len(t.samples) for t in timings)


def test_a_peer_not_installed_is_noted_and_timed_nowhere(fake_flash_attn, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn_interface", None)
    shape = bench.BenchShape(1, 2, 16, 16, True)
    impls = bench.implementations([], instrumented=False, peers=True)
    timings = bench.run_benchmark(
        [shape], impls, ["fwd", "bwd"], device="cpu", timer=_count_steps([])
    )
    fa3 = [t for t in timings if t.impl == "flash-attn-3"]
    assert [(t.mode, t.ms, t.note) for t in fa3] == [
        ("fwd", None, "not installed"), ("bwd", None, "not installed")
    ]  # fmt: skip
    assert {c[0] for c in fake_flash_attn.calls} == {2}
    assert bench.peer_versions(impls)["flash-attn-3"] is None
    assert bench.peer_versions(impls)["flash-attn-2"] == "2.7.4"
    assert bench.peer_versions(impls)["sdpa-flash"] == f"torch {torch.__version__}"
