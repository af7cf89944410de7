"""Checkpoints (flashprobe.train.checkpoint): checksums, and where a resume may start when a
checkpoint or a step log is damaged."""

from __future__ import annotations

import json

import pytest

from flashprobe.train import train_run
from flashprobe.train.checkpoint import checkpoint_problem, resume_point


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, make_config_module):
    """A 12-step run with checkpoints at steps 4, 8 and 12 (copied per test)."""
    run = tmp_path_factory.mktemp("run") / "run"
    train_run(make_config_module(train={"checkpoint_every": 4}), run)
    return run


@pytest.fixture
def run(tmp_path, finished_run):
    import shutil

    shutil.copytree(finished_run, tmp_path / "run")
    (tmp_path / "run" / "summary.json").unlink()  # as if killed after its last checkpoint
    return tmp_path / "run"


def folder(run, step: int):
    return run / "checkpoints" / f"step_{step:07d}"


def test_an_intact_run_resumes_from_its_newest_checkpoint(run) -> None:
    point = resume_point(run)
    assert (point.checkpoint, point.step, point.newest) == (folder(run, 12), 12, 12)
    assert point.notes == () and point.describe() is None
    state = json.loads((folder(run, 12) / "state.json").read_text())
    assert set(state["files"]) == {"model.safetensors", "optimizer.safetensors"}


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda f: _flip_byte(f / "model.safetensors"), "model.safetensors does not match"),
        (lambda f: _truncate(f / "optimizer.safetensors"), "optimizer.safetensors does not"),
        (lambda f: (f / "model.safetensors").unlink(), "model.safetensors is missing"),
        (lambda f: (f / "state.json").write_text("{torn"), "state.json is unreadable"),
        (lambda f: (f / "state.json").unlink(), "no state.json"),
    ],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(run, damage, problem) -> None:
    damage(folder(run, 12))
    assert problem in checkpoint_problem(folder(run, 12))
    point = resume_point(run)
    assert (point.checkpoint, point.step) == (folder(run, 8), 8)
    assert point.describe().startswith(
        f"resumed from step 8, not step 12: checkpoint step_0000012 is damaged ({problem}"
    )


def test_a_garbage_latest_pointer_does_not_matter(run) -> None:
    (run / "checkpoints" / "latest").write_text("../../etc\n")
    assert resume_point(run).step == 12


def test_every_checkpoint_damaged_starts_over_and_says_so(run) -> None:
    for step in (4, 8, 12):
        _flip_byte(folder(run, step) / "model.safetensors")
    point = resume_point(run)
    assert point.checkpoint is None and point.step == 0
    assert point.describe().startswith("resumed from the start, not step 12: checkpoint step_")


@pytest.mark.parametrize("log", ["metrics.jsonl", "data_order.jsonl"])
def test_a_damaged_log_line_sends_the_resume_back_before_it(run, log) -> None:
    path = run / log
    lines = path.read_text().splitlines()
    lines[6] = lines[6][:10]  # step 6's record torn mid-file: steps 0-5 intact
    path.write_text("\n".join(lines) + "\n")
    point = resume_point(run)
    assert (point.checkpoint, point.step) == (folder(run, 4), 4)
    assert f"{log} line 7 is damaged (steps from 6 are recomputed)" in point.describe()


def test_a_torn_last_line_past_the_newest_checkpoint_changes_nothing(run) -> None:
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 12, "lo')
    point = resume_point(run)
    assert point.step == 12 and point.notes == ()


def _flip_byte(path) -> None:
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


@pytest.mark.parametrize(
    "pointer", [b"", b"\n", b"\xff\xfe\x00garbage", b"..\n", b"checkpoints\n", b"step_x\n"]
)
def test_a_latest_pointer_naming_no_checkpoint_is_none(run, pointer: bytes) -> None:
    from flashprobe.train.checkpoint import latest_checkpoint

    (run / "checkpoints" / "latest").write_bytes(pointer)
    assert latest_checkpoint(run) is None


def test_a_latest_pointer_that_is_a_folder_is_none(run) -> None:
    from flashprobe.train.checkpoint import latest_checkpoint

    (run / "checkpoints" / "latest").unlink()
    (run / "checkpoints" / "latest").mkdir()
    assert latest_checkpoint(run) is None
    assert resume_point(run).step == 12


def test_a_killed_writes_temporary_folder_goes_at_the_next_checkpoint(tmp_path) -> None:
    """SIGKILL during a checkpoint write leaves `.step_N.<random>.tmp` (as large as a
    checkpoint); the run's next write removes it, and nothing reads it meanwhile."""
    import torch

    from flashprobe.train.checkpoint import latest_checkpoint, save_checkpoint

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    root = tmp_path / "run" / "checkpoints"
    save_checkpoint(tmp_path / "run", 4, model, optimizer, {})
    abandoned = root / ".step_0000008.k_1x2y.tmp"
    abandoned.mkdir()
    (abandoned / "model.safetensors").write_bytes(b"half")
    assert latest_checkpoint(tmp_path / "run") == root / "step_0000004"  # a reader leaves it
    assert abandoned.exists()
    save_checkpoint(tmp_path / "run", 8, model, optimizer, {})
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_0000004", "step_0000008"]
