"""How the command's process takes SIGINT and SIGTERM: held while the commands import, SIGTERM
as Ctrl-C (a step finished and checkpointed in training), one line and the signal's exit code
wherever it lands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tiny_suite import tiny_suite

from flashprobe.cli import signals
from flashprobe.train.interrupt import DeferredInterrupt


@pytest.fixture
def restored_handlers():
    """Put SIGINT's and SIGTERM's handlers and the module's record back after the test."""
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGINT, saved[0])
    signal.signal(signal.SIGTERM, saved[1])
    signals.received = None


def test_a_ctrl_c_while_importing_is_held_until_after(restored_handlers) -> None:
    with signals.holding_interrupts() as arrived:
        os.kill(os.getpid(), signal.SIGINT)  # would raise KeyboardInterrupt mid-import
        time.sleep(0.01)
    assert arrived == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signals.interrupt_exit_code() == 130


def test_sigterm_does_what_ctrl_c_does(restored_handlers) -> None:
    signals.terminate_as_interrupt()
    with DeferredInterrupt() as deferred:  # training: the step finishes, then it stops
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert deferred.requested
    with pytest.raises(KeyboardInterrupt):  # elsewhere: at once
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert signals.interrupt_exit_code() == 143


def test_sigterm_keeps_its_default_under_torchrun(restored_handlers, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signals.terminate_as_interrupt()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_interrupt_outside_training_is_one_line_with_its_code(
    tmp_path, run_cli, monkeypatch
) -> None:
    """typer turns a KeyboardInterrupt into Exit(130) before the entry point sees it."""
    from flashprobe.reporting import report

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "build_reports", interrupted)
    (tmp_path / "store").mkdir()
    result = run_cli("report", str(tmp_path / "store"))
    assert (result.code, result.err) == (130, "flashprobe: interrupted\n")


def test_an_interrupt_during_the_replay_after_training_says_what_is_kept(
    tmp_path, run_cli, monkeypatch
) -> None:
    from flashprobe.runner import suite_run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(suite_run, "replay_finished", interrupted)
    raw = tiny_suite({"base": {"train": {"steps": 2}}, "variants": {"fa2": {}},
                      "replay": {"baseline": "fa2"}})  # fmt: skip
    raw["base"]["capture"] = {"layers": [0], "steps": [1]}
    config = tmp_path / "suite.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = run_cli("ablate", "-c", str(config), "--store", str(tmp_path / "store"))
    assert result.code == 130
    assert result.err.endswith(
        "flashprobe: interrupted during the replay; the trained cells are kept: rerun the same "
        "command to replay them\n"
    )


def test_sigterm_during_training_checkpoints_the_step_and_exits_143(tmp_path: Path) -> None:
    raw = tiny_suite({"base": {"train": {"steps": 400, "checkpoint_every": 0},
                               "metrics": {"eval_every": 0, "spectral_every": 0,
                                           "attention_stats_every": 0}},
                      "variants": {"fa2": {}}})  # fmt: skip
    config, store = tmp_path / "suite.yaml", tmp_path / "store"
    config.write_text(yaml.safe_dump(raw))
    command = [sys.executable, "-m", "flashprobe", "ablate", "-c", str(config), "--store",
               str(store), "--log-every", "0"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    metrics = None
    while metrics is None or metrics.read_bytes().count(b"\n") < 3:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        found = list(store.glob("tiny/fa2--*/run/metrics.jsonl"))
        metrics = found[0] if found else None
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert err.decode().endswith(
        "flashprobe: interrupted; rerun with --resume to continue the unfinished cell\n"
    )
    run = metrics.parent
    reached = json.loads((run / "interrupted.json").read_text())["steps_done"]
    assert 3 <= reached < 400
    assert (run / "checkpoints" / f"step_{reached:07d}").is_dir()  # no periodic checkpoints
