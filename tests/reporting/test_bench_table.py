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
