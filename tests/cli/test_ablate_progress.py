"""`flashprobe ablate` progress in a log (stderr not a terminal): a line every N steps with the
cell's and the suite's ETA, one line per finished cell."""

from __future__ import annotations

import re

import pytest
import yaml

from flashprobe.cli.ablate_progress import _overhead, log_interval

SUITE = {
    "name": "tiny",
    "base": {
        "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 32,
                  "attention": {"impl": "flashprobe", "backend": "emulator"}},
        "data": {"max_bytes": 50_000},
        "train": {"steps": 6, "batch_size": 2, "device": "cpu", "checkpoint_every": 0},
        "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 0},
    },
    "variants": {"fa2": {}, "sfa": {"kernel": {"preset": "sfa"}}},
}  # fmt: skip


@pytest.mark.parametrize(
    ("steps", "every"), [(1, 1), (40, 5), (100, 10), (2500, 200), (3500, 500), (20000, 2000)]
)
def test_about_ten_lines_per_cell_at_round_steps(steps: int, every: int) -> None:
    assert log_interval(steps) == every


def test_a_log_gets_a_line_every_n_steps_with_both_etas(run_cli, tmp_path) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(SUITE))
    store = str(tmp_path / "store")
    result = run_cli("ablate", "-c", str(config), "--store", store, "--log-every", "2")
    assert result.code == 0, result.err
    lines = [line for line in result.err.splitlines() if ": step " in line]
    assert [re.search(r"\] (\S+): step (\d+)/6", line).groups() for line in lines] == [
        (cell, str(step)) for cell in ("fa2/seed0", "sfa/seed0") for step in (2, 4)
    ]
    assert all(re.search(r"ETA cell \d+:\d\d, suite \d+:\d\d$", line) for line in lines[1:])
    assert lines[0].startswith("[1/2] fa2/seed0: step 2/6, loss ")
    assert "[2/2] sfa/seed0: done, 6 steps" in result.err  # the finished cell's line
    quiet = run_cli("ablate", "-c", str(config), "--store", str(tmp_path / "q"), "--log-every", "0")
    assert quiet.code == 0 and ": step " not in quiet.err and "[1/2] fa2/seed0: done" in quiet.err


def test_the_cell_line_names_the_phases_that_took_a_twentieth_of_the_time() -> None:
    phases = {"train": 215.0, "eval": 2.0, "spectral": 20.0, "checkpoint": 31.0, "other": 4.0}
    summary = {"wall_time_s": 272.0, "time_by_phase_s": phases}
    assert _overhead(summary) == " (spectral 0:20, checkpoint 0:31)"
    assert _overhead({"wall_time_s": 272.0}) == ""  # a summary from before the phases
    assert _overhead({"wall_time_s": 0, "time_by_phase_s": phases}) == ""
    tiny = {"train": 0.5, "eval": 0.2, "other": 0.1}  # a CPU test cell: nothing worth naming
    assert _overhead({"wall_time_s": 0.8, "time_by_phase_s": tiny}) == ""
