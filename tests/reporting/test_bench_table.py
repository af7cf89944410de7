from __future__ import annotations

from flashprobe.probes import benchmark as bench
from flashprobe.reporting.bench_table import bench_tables


def test_table_shows_tflops_and_ratios() -> None:
    shape = bench.BenchShape(32, 16, 1024, 64, True)
    impls = bench.implementations(["fa2", "sfa"], instrumented=True, peers=True)
    timings = [
        bench.Timing(shape, "fa2", "fwd", 1.0, 300.0),
        bench.Timing(shape, "sfa", "fwd", 1.0, 294.0),
        bench.Timing(shape, "fa2+stats", "fwd", 1.0, 285.0),
        bench.Timing(shape, "sdpa-flash", "fwd", 1.0, 250.0),
        bench.Timing(shape, "sdpa-cudnn", "fwd", None, None, "unavailable"),
    ]
    text = bench_tables(timings, impls)
    assert "fwd (TFLOP/s)" in text
    assert "fa2/flash" in text and "sfa/fa2" in text and "fa2+stats/fa2" in text
    assert "1.20×" in text  # fa2 / sdpa-flash
    assert "0.98×" in text  # sfa / fa2
    assert "0.95×" in text  # instrumented / plain
    assert "n/a" in text  # cuDNN missing is shown, not hidden


def test_flash_attention_peers_get_ratio_columns_and_a_missing_one_a_line() -> None:
    small = bench.BenchShape(32, 16, 1024, 64, True)
    large = bench.BenchShape(32, 16, 1024, 512, True)
    impls = bench.implementations(["fa2"], instrumented=False, peers=True)
    timings = []
    for shape in (small, large):
        for mode in ("fwd", "bwd"):
            timings += [
                bench.Timing(shape, "fa2", mode, 1.0, 300.0),
                bench.Timing(shape, "sdpa-flash", mode, 1.0, 250.0),
                bench.Timing(shape, "sdpa-cudnn", mode, 1.0, 375.0),
                bench.Timing(shape, "flash-attn-3", mode, None, None, "not installed"),
            ]
    timings += [
        bench.Timing(small, "flash-attn-2", "fwd", 1.0, 400.0),
        bench.Timing(small, "flash-attn-2", "bwd", 1.0, 240.0),
        bench.Timing(large, "flash-attn-2", "fwd", None, None, "unsupported: head dim 512 > 256"),
        bench.Timing(large, "flash-attn-2", "bwd", None, None, "unsupported: head dim 512 > 256"),
    ]
    text = bench_tables(timings, impls)
    fwd, bwd, notes = text.split("\n\n")
    for table in (fwd, bwd):
        header = table.splitlines()[1].split()
        assert header == [
            "shape", "fa2", "sdpa-flash", "sdpa-cudnn", "flash-attn-2",
            "fa2/flash", "fa2/cudnn", "fa2/FA2",
        ]  # fmt: skip
    assert fwd.splitlines()[3].split()[-3:] == ["1.20×", "0.80×", "0.75×"]
    assert bwd.splitlines()[3].split()[-1] == "1.25×"
    assert fwd.splitlines()[4].split()[-1] == "n/a"  # FA2 unsupported there: shown, not hidden
    assert notes.splitlines() == [
        "flash-attn-3: not installed",
        "flash-attn-2: unsupported: head dim 512 > 256 (2 of 4 timings)",
    ]


def test_the_base_preset_with_atomic_dq_is_compared_to_the_peers_and_to_the_base() -> None:
    shape = bench.BenchShape(32, 16, 1024, 64, True)
    impls = bench.implementations(["fa2"], instrumented=False, peers=True, dq="both")
    timings = [
        bench.Timing(shape, "fa2", "bwd", 1.0, 300.0),
        bench.Timing(shape, "fa2+atomic-dq", "bwd", 1.0, 360.0),
        bench.Timing(shape, "sdpa-flash", "bwd", 1.0, 250.0),
        bench.Timing(shape, "sdpa-cudnn", "bwd", 1.0, 400.0),
        bench.Timing(shape, "flash-attn-2", "bwd", None, None, "not installed"),
        bench.Timing(shape, "flash-attn-3", "bwd", None, None, "not installed"),
    ]
    table = bench_tables(timings, impls).split("\n\n")[0]
    header, row = table.splitlines()[1].split(), table.splitlines()[3].split()
    assert header[-5:] == [
        "fa2/flash", "fa2/cudnn", "fa2+atomic-dq/flash", "fa2+atomic-dq/cudnn",
        "fa2+atomic-dq/fa2",
    ]  # fmt: skip
    assert row[-5:] == ["1.20×", "0.75×", "1.44×", "0.90×", "1.20×"]


def test_another_preset_with_atomic_dq_is_compared_to_the_base_with_atomic_dq() -> None:
    shape = bench.BenchShape(32, 16, 1024, 64, True)
    impls = bench.implementations(["fa2", "sfa"], instrumented=False, peers=False, dq="both")
    timings = [
        bench.Timing(shape, "fa2", "bwd", 1.0, 300.0),
        bench.Timing(shape, "fa2+atomic-dq", "bwd", 1.0, 400.0),
        bench.Timing(shape, "sfa", "bwd", 1.0, 270.0),
        bench.Timing(shape, "sfa+atomic-dq", "bwd", 1.0, 380.0),
    ]
    table = bench_tables(timings, impls).split("\n\n")[0]
    header, row = table.splitlines()[1].split(), table.splitlines()[3].split()
    columns = dict(zip(header[-3:], row[-3:], strict=True))
    assert columns == {
        "fa2+atomic-dq/fa2": "1.33×",
        "sfa/fa2": "0.90×",
        "sfa+atomic-dq/fa2+atomic-dq": "0.95×",
    }
