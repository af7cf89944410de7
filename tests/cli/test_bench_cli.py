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
