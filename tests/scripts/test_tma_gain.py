"""scripts/tma_gain.py: pointer against TMA loads per tuned key, from gpu_kernels' tune log."""

from __future__ import annotations

import json
import math

import pytest
from script_helpers import load_script, refused

gain = load_script("tma_gain")

FWD = "fwd|d64|causal|bn64|bf16|onepass"
BWD = "bwd|d128|full|bf16|dot16"
LOG = {
    FWD: [
        [{"block_m": 128, "num_warps": 8, "num_stages": 3}, 1.20],
        [{"block_m": 64, "num_warps": 4, "num_stages": 3}, 1.10],
        [{"block_m": 128, "num_warps": 8, "num_stages": 3, "tma": True}, 1.00],
        [{"block_m": 64, "num_warps": 4, "num_stages": 3, "tma": True}, math.inf],  # failed
    ],
    BWD: [[{"block_m1": 64, "num_warps": 4, "num_stages": 2}, 2.0]],  # not timed with TMA
}


def test_the_fastest_of_each_side_per_key() -> None:
    rows = {r["key"]: r for r in gain.gains(LOG)}
    fwd = rows[FWD]
    assert (fwd["pointer ms"], fwd["TMA ms"]) == (1.10, 1.00)
    assert fwd["pointer ÷ TMA"] == pytest.approx(1.10)
    assert fwd["TMA config"] == "block_m=128 num_warps=8 num_stages=3"
    assert rows[BWD]["TMA ms"] is None and rows[BWD]["pointer ÷ TMA"] is None


def test_the_table_from_a_log_with_its_environment(tmp_path, capsys) -> None:
    path = tmp_path / "tune_log.json"
    env = {"gpu": "NVIDIA H200", "torch": "2.11", "triton": "3.6"}
    path.write_text(json.dumps({"environment": env, "seq": 4096, "timings": LOG}))
    assert gain.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NVIDIA H200, torch 2.11, triton 3.6")
    assert "pointer ÷ TMA over 1 keys: 1.10–1.10×" in out
    plain = tmp_path / "old.json"  # a log written before it recorded its environment
    plain.write_text(json.dumps(LOG))
    assert gain.main([str(plain)]) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "tune log not found: "),
        ("{", "tune log is not JSON: "),
        ("{}", "holds no timings"),
        ('{"k": [[1, 2]]}', "k is not a list of [config, ms]"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, content, message) -> None:
    path = tmp_path / "log.json"
    if content is not None:
        path.write_text(content)
    assert message in refused(gain.main, capsys, [str(path)], "tma_gain.py")
