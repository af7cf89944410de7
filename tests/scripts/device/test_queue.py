"""scripts/device/queue.sh and collect.sh on the CPU: a queue that trains the tiny suite is
collected into a digest the digest reader loads; a failing line is logged with its exit code
and the queue goes on; lines cannot swallow the queue through stdin; a queue started again is
waited for."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml
from queue_harness import DeviceQueue
from tiny_suite import tiny_suite

from flashprobe.reporting.digest.loader import load_digest

SHA = "0123456789abcdef0123456789abcdef01234567"
TINY = tiny_suite(
    {
        "base": {
            "train": {"steps": 3, "checkpoint_every": 0},
            "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 0},
            "kernel": {"preset": "fa2"},
        },
        "variants": {"fa2": {}},
    }
)


def write_queue(path: Path, lines: list[str]) -> Path:
    path.write_text("# a test queue\n\n" + "\n".join(lines) + "\n")
    return path


def test_a_queue_trains_and_collect_brings_back_its_digest(
    tmp_path: Path, device_queue: DeviceQueue
) -> None:
    suite, store = tmp_path / "tiny.yaml", tmp_path / "store"
    suite.write_text(yaml.safe_dump(TINY))
    ablate = f"python3 -m flashprobe ablate -c {suite} --no-replay --store {store}"
    own = 'echo "3 passed" > "$FLASHPROBE_QUEUE_STATE/gpu-tests.log"'  # a line's own output
    queue = write_queue(tmp_path / "tiny.queue", [ablate, own])
    started = device_queue.start(queue, FLASHPROBE_GIT_SHA=SHA)
    assert started.strip() == "queue started: 2 commands"

    out = tmp_path / "out"
    collected = device_queue.collect(out, stores=str(store), wait=60)  # no FLASHPROBE_GIT_SHA
    assert collected.returncode == 0, collected.stderr
    assert "queue done" in collected.stdout.splitlines()
    assert (device_queue.state / "done").exists()

    log = (out / "queue.log").read_text()
    assert f"end (0): {ablate}" in log and f"end (0): {own}" in log, log
    assert "queue done" in log
    assert (out / "gpu-tests.log").read_text() == "3 passed\n"
    assert (out / "gpu.txt").exists()  # nvidia-smi's answer, or why there is none

    digest = load_digest(out / "store.json")
    (cell,) = digest.cells
    assert (cell.variant, cell.seed, cell.finished, cell.steps_reached) == ("fa2", 0, True, 3)
    # the queue kept the commit for collect.sh, which ran without it: both record it
    raw = json.loads((out / "store.json").read_text())
    assert raw["written_by"]["code_version"].endswith(f"+g{SHA[:12]}")
    assert cell.meta["code_version"].endswith(f"+g{SHA[:12]}")


def test_a_failing_line_is_logged_and_the_queue_goes_on(
    tmp_path: Path, device_queue: DeviceQueue
) -> None:
    failing = "sh -c 'exit 3'"
    queue = write_queue(tmp_path / "q.queue", [failing, "echo after"])
    assert device_queue.start(queue).strip() == "queue started: 2 commands"
    log = device_queue.wait_done()
    assert f"end (3): {failing}" in log, log
    assert "\nafter\n" in log and "end (0): echo after" in log, log
    assert log.rstrip().endswith("queue done")


def test_a_line_cannot_read_the_queue_from_stdin(tmp_path: Path, device_queue: DeviceQueue) -> None:
    # Lines once read stdin from the queue file itself: `cat` would swallow every later line.
    device_queue.start(write_queue(tmp_path / "q.queue", ["cat", "echo after"]))
    log = device_queue.wait_done()
    assert "end (0): cat" in log and "end (0): echo after" in log, log
    assert log.count("echo after") == 2  # its start and end: no copy of it read by cat


def test_lines_in_the_background_are_waited_for(tmp_path: Path, device_queue: DeviceQueue) -> None:
    marker = tmp_path / "late"
    lines = [f"sleep 0.5 && touch {shlex.quote(str(marker))} &", "echo next"]
    device_queue.start(write_queue(tmp_path / "q.queue", lines))
    device_queue.wait_done()
    assert marker.exists()  # the done marker came after the background line


def test_collect_waits_for_a_queue_started_again(tmp_path: Path, device_queue: DeviceQueue) -> None:
    first = write_queue(tmp_path / "first.queue", ["echo first"])
    device_queue.start(first)
    device_queue.wait_done()
    # The same state folder, as on a warm machine: the first queue's done marker is stale.
    device_queue.start(write_queue(tmp_path / "second.queue", ["sleep 1", "echo second"]))
    collected = device_queue.collect(tmp_path / "out", stores=str(tmp_path / "none"), wait=30)
    assert collected.returncode == 0, collected.stderr
    assert "queue done" in collected.stdout.splitlines()
    log = (tmp_path / "out" / "queue.log").read_text()
    assert "end (0): echo second" in log and log.count("queue done") == 2, log
    assert not (tmp_path / "out" / "none.json").exists()  # a missing store: no digest


def test_without_a_done_marker_collect_says_the_queue_still_runs(
    tmp_path: Path, device_queue: DeviceQueue
) -> None:
    device_queue.start(write_queue(tmp_path / "q.queue", ["sleep 20"]))
    collected = device_queue.collect(tmp_path / "out", stores=str(tmp_path / "none"), wait=1)
    assert "queue still running" in collected.stdout.splitlines()
    assert "start: sleep 20" in (tmp_path / "out" / "queue.log").read_text()
