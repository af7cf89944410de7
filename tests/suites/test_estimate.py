"""Suite cost estimates (flashprobe.suites.estimate): tokens by hand, time from a measured
throughput, bad throughput entries refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.runner.prepare import prepare_suite
from flashprobe.suites.estimate import (
    Throughput,
    describe_times,
    format_seconds,
    format_tokens,
    parallel_units,
    suite_tokens,
    throughputs,
)
from flashprobe.suites.suite import expand_suite

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "model": {"n_layer": 1, "n_head": 1, "n_embd": 16, "block_size": 32},
    "train": {"steps": 10, "batch_size": 4, "device": "cpu", "checkpoint_every": 5},
}


def test_smoke_tokens_by_hand() -> None:
    suite = prepare_suite(ROOT / "ablations" / "smoke.yaml")
    # 2 seeds: the fa2 baseline trains 40 steps, 4 variants branch at step 10 and train 30;
    # 8 sequences × 64 tokens per step.
    assert suite_tokens(suite) == (2 * 40 + 2 * 4 * 30) * 8 * 64
    assert parallel_units(suite.cells) == 2  # branched: (grid point, seed) groups


def test_time_uses_the_processes_that_can_run_at_once() -> None:
    t = Throughput("H200", jobs=9, tokens_per_s=100.0)
    assert t.seconds(1800, units=27) == pytest.approx(2.0)
    assert t.seconds(1800, units=3) == pytest.approx(6.0)  # 3 runs cannot fill 9 processes
    assert describe_times(1800, 27, [t], "NVIDIA H200") == [
        "≈ 2 s on H200 with --jobs 9 (this machine)"
    ]
    assert describe_times(1800, 27, [t], "cpu") == ["≈ 2 s on H200 with --jobs 9"]


def test_formats() -> None:
    assert [format_tokens(n) for n in (999, 163_840, 1_105_920_000)] == ["999", "164k", "1.11G"]
    assert [format_seconds(s) for s in (0.2, 89, 1300, 11_000, 500_000)] == [
        "1 s", "89 s", "22 min", "3.1 h", "5.8 days"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"jobs": 1, "tokens_per_s": 5}, "device"),
        ({"device": "cpu", "jobs": 0, "tokens_per_s": 5}, "jobs"),
        ({"device": "cpu", "tokens_per_s": -1}, "tokens_per_s"),
        ({"device": "cpu", "tokens_per_s": 5, "speed": 2}, "unknown key 'speed'"),
    ],
)
def test_bad_throughput_entries_are_one_line_errors(entry, needle) -> None:
    suite = expand_suite({"base": BASE, "throughput": [entry]})
    with pytest.raises(FlashprobeError, match=needle):
        throughputs(suite)


def test_throughput_must_be_a_list() -> None:
    with pytest.raises(FlashprobeError, match="must be a list"):
        throughputs(expand_suite({"base": BASE, "throughput": {"device": "cpu"}}))
