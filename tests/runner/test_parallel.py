"""`ablate --jobs`: the shard processes' command lines and logs, waiting for them, failures and
Ctrl-C (children here are tiny Python one-liners; tests/cli trains real shards)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.runner import parallel
from flashprobe.runner.branches import check_branches
from flashprobe.runner.parallel import (
    Shard,
    check_jobs,
    child_command,
    plan_shards,
    run_shards,
    trained_as_done,
)
from flashprobe.runner.plan import plan_suite
from flashprobe.runner.training import CellOutcome
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.cell_config import normalise_cell_config
from flashprobe.suites.suite import expand_suite


def python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def shard(tmp_path: Path, index: int, code: str, count: int = 2, cells: int = 1) -> Shard:
    log = parallel.log_path(tmp_path, "tiny", index, count)
    return Shard(index, count, python(code), log, cells)


def test_child_command_repeats_the_suite_arguments_for_one_shard() -> None:
    command = child_command(
        1,
        3,
        config="a.yaml",
        overrides=["seeds=[0,1]", "train.steps=4"],
        variants=["sfa"],
        store=Path("runs"),
        resume=True,
        restart=False,
    )
    assert command[:3] == [sys.executable, "-m", "flashprobe"]
    assert command[3:] == [
        "ablate", "--config", "a.yaml", "--set", "seeds=[0,1]", "--set", "train.steps=4",
        "--variant", "sfa", "--resume", "--store", "runs", "--shard", "1/3", "--no-replay",
        "--format", "json",
    ]  # fmt: skip


def test_plan_shards_counts_the_cells_each_has_to_train(tmp_path, make_suite) -> None:
    suite = expand_suite(
        make_suite(seeds=[0, 1, 2], branch={"from": "fa2", "step": 4}),
        validate=normalise_cell_config,
    )
    check_branches(suite)
    store = ResultStore(tmp_path)
    plan = plan_suite(suite, store, version="test")
    (tmp_path / "tiny" / plan[2].path.name).mkdir(parents=True)  # seed 1's fa2 is finished
    (tmp_path / "tiny" / plan[2].path.name / "summary.json").write_text("{}")
    plan = plan_suite(suite, store, version="test")
    shards = plan_shards(
        plan, 2, store_root=tmp_path, suite="tiny", command=lambda k, n: ["run", f"{k}/{n}"]
    )
    assert [(s.index, s.count, s.command, s.cells) for s in shards] == [
        (0, 2, ("run", "0/2"), 4),  # seeds 0 and 2: groups 0 and 2
        (1, 2, ("run", "1/2"), 1),  # seed 1: its sfa only
    ]
    assert shards[1].log == tmp_path / "tiny" / "logs" / "shard-1-of-2.log"
    assert shards[1].name == "shard 1/2"


def test_run_shards_waits_for_all_and_logs_each(tmp_path) -> None:
    lines: list[str] = []
    shards = [
        shard(tmp_path, 0, "import time; time.sleep(0.5); print('zero')"),
        shard(tmp_path, 1, "import sys; print('one'); sys.exit(3)"),
        shard(tmp_path, 2, "raise SystemExit(9)", count=3, cells=0),  # nothing to do: not started
    ]
    results = run_shards(shards, say=lines.append, poll_s=0.05)
    assert [(r.shard.index, r.returncode, r.ok) for r in results] == [(0, 0, True), (1, 3, False)]
    assert results[0].seconds >= 0.5
    assert lines[0].startswith("shard 0/2: started, 1 cells to train (pid ")
    assert lines[2] == "shard 2/3: nothing to train"
    assert lines[3].startswith("shard 1/2: FAILED (exit 3) after 0:0")  # the failure first
    assert lines[4].startswith("shard 0/2: done (exit 0) after 0:0")
    assert lines[4].endswith(f"; log {tmp_path / 'tiny' / 'logs' / 'shard-0-of-2.log'}")
    log = (tmp_path / "tiny" / "logs" / "shard-1-of-2.log").read_text().splitlines()
    assert log[0].startswith("== 20") and log[1].startswith("$ ")
    assert log[1].endswith("sys.exit(3)'") and log[2] == "one"
    assert not (tmp_path / "tiny" / "logs" / "shard-2-of-3.log").exists()
    run_shards(shards[:1], say=lines.append, poll_s=0.05)  # a rerun appends to the shard's log
    again = (tmp_path / "tiny" / "logs" / "shard-0-of-2.log").read_text()
    assert again.count("\nzero\n") == 2 and again.count("\n$ ") == 2


@pytest.mark.parametrize("ignores_sigint", [False, True])
def test_ctrl_c_stops_the_children(tmp_path, monkeypatch, ignores_sigint: bool) -> None:
    started: list[subprocess.Popen[bytes]] = []
    start = parallel._start

    def spy(shard: Shard) -> subprocess.Popen[bytes]:
        started.append(start(shard))
        return started[-1]

    def interrupt(line: str) -> None:
        if line.startswith("shard 1/2: started"):
            time.sleep(0.3)  # let the children get going
            raise KeyboardInterrupt

    monkeypatch.setattr(parallel, "_start", spy)
    ignore = "signal.signal(signal.SIGINT, signal.SIG_IGN); " if ignores_sigint else ""
    code = f"import signal, time; {ignore}time.sleep(60)"
    shards = [shard(tmp_path, 0, code), shard(tmp_path, 1, code)]
    begin = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_shards(shards, say=interrupt, settle_s=0.1, grace_s=0.5)
    assert time.monotonic() - begin < 10
    assert len(started) == 2 and all(p.returncode is not None for p in started)
    expected = -15 if ignores_sigint else -2  # SIGTERM after the grace, else SIGINT
    assert [p.returncode for p in started] == [expected, expected]


def test_trained_cells_read_back_as_done(tmp_path, make_suite) -> None:
    suite = expand_suite(make_suite(), validate=normalise_cell_config)
    plan = plan_suite(suite, ResultStore(tmp_path), version="test")
    outcomes = [CellOutcome(p, "cached", {"final_loss": 1.0}) for p in plan]
    marked = trained_as_done(outcomes, [plan[1].path])
    assert [o.status for o in marked] == ["cached", "done"]
    assert marked[1].summary == {"final_loss": 1.0}


def test_jobs_do_not_combine_with_torchrun(monkeypatch) -> None:
    check_jobs(4)
    monkeypatch.setenv("WORLD_SIZE", "2")
    check_jobs(1)
    with pytest.raises(FlashprobeError, match="--jobs does not combine with torchrun"):
        check_jobs(2)


def test_children_share_the_cpu_cores(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    env = parallel.child_environment(3)
    assert env["OMP_NUM_THREADS"] == "5" and env["PYTHONUNBUFFERED"] == "1"
    assert parallel.child_environment(32)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "8")  # the user's choice stands
    assert parallel.child_environment(3)["OMP_NUM_THREADS"] == "8"


def test_children_are_spread_over_the_gpus(tmp_path, monkeypatch) -> None:
    shards = [shard(tmp_path, i, "pass", count=4, cells=int(i != 1)) for i in range(4)]
    assert parallel.spread_over_gpus(shards, ["0"]) == shards  # one GPU: shared as before
    spread = parallel.spread_over_gpus(shards, ["3", "5"])
    assert [s.gpu for s in spread] == ["3", None, "5", "3"]  # shard 1 has nothing to train
    assert parallel.child_environment(4, "5")["CUDA_VISIBLE_DEVICES"] == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,7")
    assert parallel.child_environment(4)["CUDA_VISIBLE_DEVICES"] == "2,7"  # the parent's
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert parallel.visible_gpus() == ["2", "7"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,1,4")  # more listed than torch sees
    assert parallel.visible_gpus() == ["6", "1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert parallel.visible_gpus() == ["0", "1"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert parallel.visible_gpus() == []


def test_a_child_sees_only_its_gpu(tmp_path) -> None:
    code = "import os; print('gpu', os.environ['CUDA_VISIBLE_DEVICES'])"
    lines: list[str] = []
    (result,) = run_shards(
        [dataclasses.replace(shard(tmp_path, 0, code), gpu="3")], say=lines.append, poll_s=0.05
    )
    assert result.ok and lines[0].startswith("shard 0/2: started on GPU 3, 1 cells to train")
    assert "gpu 3" in (tmp_path / "tiny" / "logs" / "shard-0-of-2.log").read_text()


def _gone(pid: int) -> bool:
    """The process ended (a zombie nobody reaped counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc: Linux")
def test_a_shard_dies_with_its_parent_killed_9(tmp_path) -> None:
    """The kernel's parent-death signal: a child that does nothing to watch its parent (a plain
    sleep here) still ends when the parent that started it is killed with SIGKILL."""
    parent_code = (
        "import sys, time; from pathlib import Path; from flashprobe.runner import parallel;"
        f"shard = parallel.Shard(0, 1, {python('import time; time.sleep(60)')!r},"
        f" Path({str(tmp_path / 'shard.log')!r}), 1);"
        "print(parallel._start(shard).pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(python(parent_code), stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert not _gone(child)
    finally:
        parent.kill()
        parent.wait()
    assert _wait_gone(child, 10), f"shard process {child} outlived its parent"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")
def test_a_shard_watches_its_parent_where_no_death_signal_is_armed(tmp_path) -> None:
    """The fallback: a shard started without prctl (another OS) stops once its parent pid is
    gone, through watch_parent, as on SIGTERM (KeyboardInterrupt, not a silent kill)."""
    ready, log = tmp_path / "ready", tmp_path / "child.log"
    child_code = (
        "import os, time; from pathlib import Path; from flashprobe.runner import parallel;"
        "parallel.watch_parent(poll_s=0.05); Path(os.environ['READY']).write_text(str(os.getpid()))"
        "\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
        "    Path(os.environ['READY']).write_text('stopped')"
    )
    middle_code = (
        "import os, subprocess, sys, time;"
        f"env = {{**os.environ, {parallel.PARENT_ENV!r}: str(os.getpid()),"
        f" 'READY': {str(ready)!r}}};"
        f"subprocess.Popen({python(child_code)!r}, env=env, stdout=open({str(log)!r}, 'w'),"
        " stderr=subprocess.STDOUT); time.sleep(60)"
    )
    middle = subprocess.Popen(python(middle_code))
    try:
        deadline = time.monotonic() + 30
        while not ready.is_file() or not ready.read_text().isdigit():
            assert time.monotonic() < deadline and middle.poll() is None
            time.sleep(0.05)
        child = int(ready.read_text())
    finally:
        middle.kill()
        middle.wait()
    assert _wait_gone(child, 10), f"process {child} outlived its parent"
    assert ready.read_text() == "stopped", log.read_text()


@pytest.mark.parametrize("jobs", [0, -1, True, 2.0])
def test_jobs_must_be_a_count(jobs) -> None:
    with pytest.raises(FlashprobeError, match="--jobs must be an integer >= 1"):
        check_jobs(jobs)


def test_a_file_where_the_shard_logs_go_is_bad_input_before_any_shard_starts(tmp_path) -> None:
    """`STORE/<suite>/logs` as a file: one line naming it (it was exit 1, "File exists")."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "logs").write_text("kept")
    said: list[str] = []
    shards = [shard(tmp_path, k, "pass") for k in (0, 1)]
    with pytest.raises(FlashprobeError, match=r"shard logs folder .*logs is not a folder"):
        run_shards(shards, say=said.append)
    assert said == [] and (tmp_path / "tiny" / "logs").read_text() == "kept"
