"""Benchmark harness logic that does not need a GPU (timing itself runs on the H200)."""

from __future__ import annotations

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


def test_implementations_add_instrumented_base_and_peers() -> None:
    impls = bench.implementations(["fa2", "sfa"], instrumented=True, peers=True)
    assert [i.name for i in impls] == [
        "fa2", "sfa", "fa2+stats", "sdpa-flash", "sdpa-cudnn", "flash-attn-2", "flash-attn-3"
    ]  # fmt: skip
    assert [i.flash_attn for i in impls[-2:]] == [2, 3]
    assert {i.layout for i in impls[:-2]} == {"bhnd"} and impls[-1].layout == "bnhd"
    assert impls[2].instrument and impls[2].spec == impls[0].spec


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
