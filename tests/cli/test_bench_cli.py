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


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--dtype", "fp8"), "--dtype must be one of bf16, fp16, got 'fp8'"),
        (("--seed", "-1"), "--seed must be in [0, 2**63), got -1"),
    ],
)
def test_bench_names_a_bad_value_before_asking_for_a_gpu(run_cli, args, needle) -> None:
    result = run_cli("bench", "--seq", "1024", *args)
    assert result.code == 2
    assert needle in result.err and len(result.err.strip().splitlines()) == 1


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


def test_bench_rejects_an_unknown_dq_accumulation(run_cli) -> None:
    result = run_cli("bench", "--seq", "1024", "--dq", "fast")
    assert result.code == 2
    assert "--dq must be one of ordered, atomic, both, got 'fast'" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_bench_json_records_the_dq_accumulation(run_cli, tmp_path, monkeypatch) -> None:
    import json

    from flashprobe.probes import benchmark
    from flashprobe.reporting import bench_table

    monkeypatch.setattr(benchmark, "run_benchmark", lambda *args, **kwargs: [])
    monkeypatch.setattr(bench_table, "bench_tables", lambda timings, impls: "no timings")
    path = tmp_path / "bench.json"
    result = run_cli("bench", "--preset", "fa2", "--dq", "both", "--json", str(path))
    assert result.code == 0, result.err
    payload = json.loads(path.read_text())
    assert payload["config"]["dq"] == "both"
    assert set(payload["specs"]) == {"fa2", "fa2+atomic-dq", "fa2+stats"}


def test_bench_rejects_kv_heads_that_do_not_divide_the_heads(run_cli) -> None:
    result = run_cli("bench", "--seq", "1024", "--heads", "16", "--kv-heads", "5")
    assert result.code == 2
    assert "kv heads must divide the 16 heads, got 5" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_bench_notes_a_missing_peer_in_one_line_and_records_peer_versions(
    run_cli, tmp_path, monkeypatch
) -> None:
    """FlashAttention-2 (a fake computing attention with torch) is timed and its version
    recorded; FlashAttention-3 is not installed: one line, no traceback, exit 0. The peers run
    on the CPU here, through the real run_benchmark with a timer that runs each step once."""
    import json
    import sys
    import types

    import torch.nn.functional as F

    from flashprobe.probes import benchmark

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
        out = F.scaled_dot_product_attention(
            *(t.transpose(1, 2) for t in (q, k, v)), is_causal=causal, scale=softmax_scale
        )
        return out.transpose(1, 2)

    fa2 = types.ModuleType("flash_attn")
    fa2.__version__, fa2.flash_attn_func = "2.8.3", flash_attn_func
    monkeypatch.setitem(sys.modules, "flash_attn", fa2)
    monkeypatch.setitem(sys.modules, "flash_attn_interface", None)
    real_run = benchmark.run_benchmark

    def run_once(step) -> float:
        step()
        return 2.0

    def run_peers_on_cpu(shapes, impls, modes, **kwargs):
        peers = [i for i in impls if i.spec is None]  # our kernels need the GPU
        return real_run(shapes, peers, modes, **kwargs, device="cpu", timer=run_once)

    monkeypatch.setattr(benchmark, "run_benchmark", run_peers_on_cpu)
    path = tmp_path / "bench.json"
    args = ["--preset", "fa2", "--seq", "32", "--tokens", "64", "--head-dim", "16"]
    result = run_cli("bench", *args, "--mask", "causal", "--repeats", "1", "--json", str(path))
    assert result.code == 0, result.err
    assert "Traceback" not in result.out + result.err
    assert "flash-attn-3: not installed" in result.out.splitlines()
    assert "fa2/FA2" in result.out and "fa2/FA3" not in result.out
    data = json.loads(path.read_text())
    assert data["peers"]["flash-attn-2"] == "2.8.3" and data["peers"]["flash-attn-3"] is None
    assert {"gpu", "torch", "triton"} <= set(data["environment"])
    fa2_timings = [t for t in data["timings"] if t["impl"] == "flash-attn-2"]
    assert [t["mode"] for t in fa2_timings] == ["fwd", "bwd", "fwd+bwd"]
    assert [(t["ms"], t["note"]) for t in fa2_timings] == [(2.0, "")] * 3
    fa3_notes = {t["note"] for t in data["timings"] if t["impl"] == "flash-attn-3"}
    assert fa3_notes == {"not installed"}


def test_bench_refuses_an_unwritable_json_folder_before_timing(
    run_cli, tmp_path, monkeypatch
) -> None:
    """A --json path under a file is refused before any timing, not after a grid of minutes."""
    from flashprobe.probes import benchmark

    timed = []
    monkeypatch.setattr(benchmark, "run_benchmark", lambda *args, **kwargs: timed.append(1) or [])
    blocker = tmp_path / "results"
    blocker.write_text("earlier results")
    result = run_cli("bench", "--seq", "1024", "--json", str(blocker / "bench.json"))
    assert result.code == 2, result.err
    assert "--json" in result.err and "is not a folder" in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert timed == [] and blocker.read_text() == "earlier results"
