from __future__ import annotations

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error path")
def test_bench_cli_on_cpu_exits_2(run_cli) -> None:
    result = run_cli("bench", "--seq", "1024")
    assert result.code == 2
    assert "needs a CUDA GPU" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_bench_refuses_to_overwrite_json(run_cli, tmp_path) -> None:
    path = tmp_path / "bench.json"
    path.write_text("earlier results")
    result = run_cli("bench", "--json", str(path))
    assert result.code == 2 and "exists" in result.err
    assert path.read_text() == "earlier results"


def test_bench_rejects_zero_repeats(run_cli) -> None:
    result = run_cli("bench", "--seq", "1024", "--repeats", "0")
    assert result.code == 2
    assert "repeats must be at least 1" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_bench_json_records_the_gpu_it_ran_on(run_cli, tmp_path, monkeypatch) -> None:
    """The JSON's environment names the CUDA device (its GPU model where one is visible)."""
    import json

    from flashprobe.probes import benchmark
    from flashprobe.reporting import bench_table

    monkeypatch.setattr(benchmark, "run_benchmark", lambda *args, **kwargs: [])
    monkeypatch.setattr(bench_table, "bench_tables", lambda timings, impls: "no timings")
    path = tmp_path / "bench.json"
    result = run_cli("bench", "--seq", "1024", "--json", str(path))
    assert result.code == 0, result.err
    env = json.loads(path.read_text())["environment"]
    assert env["device"] == "cuda"
    if torch.cuda.is_available():
        assert env["gpu"] == torch.cuda.get_device_name(0)


def test_bench_rejects_kv_heads_that_do_not_divide_the_heads(run_cli) -> None:
    result = run_cli("bench", "--seq", "1024", "--heads", "16", "--kv-heads", "5")
    assert result.code == 2
    assert "kv heads must divide the 16 heads, got 5" in result.err
    assert len(result.err.strip().splitlines()) == 1
