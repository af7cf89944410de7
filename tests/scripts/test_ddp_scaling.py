"""scripts/ddp_scaling.py: bad input stops before any run (one line, exit 2), an earlier
result is kept, and a failed run makes the script fail."""

from __future__ import annotations

import json

import pytest
import torch
from script_helpers import load_script, refused

ddp = load_script("ddp_scaling")

CPU = ["--device", "cpu", "--world-sizes", "1", "--specs", "fa2", "--steps", "3", "--warmup", "1"]


@pytest.fixture
def launches(monkeypatch) -> list:
    """launch() recorded instead of run (torchrun is not started)."""
    calls: list = []

    def fake(args, spec, world_size, result):  # type: ignore[no-untyped-def]
        calls.append((spec, world_size))
        return {"world_size": world_size, "spec": spec, "median_tokens_per_s": 100.0}

    monkeypatch.setattr(ddp, "launch", fake)
    return calls


def _refused(capsys, argv: list[str]) -> str:
    return refused(ddp.main, capsys, argv, "ddp_scaling.py")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "-1"], "--steps must be >= 1, got -1"),
        (["--steps", "0"], "--steps must be >= 1, got 0"),
        (["--world-sizes", "0"], "--world-sizes must be GPU counts >= 1, got 0"),
        (["--steps", "3", "--warmup", "3"], "--steps 3 leaves no step after --warmup 3"),
        (["--specs", "nope"], "--specs nope: unknown preset"),
        (["--batch", "0"], "--batch must be >= 1"),
        (["--world-sizes", "1000"], "no world size of 1000 can run"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_settings_stop_before_anything_runs(tmp_path, capsys, launches, flags, message):
    out = tmp_path / "out"
    assert message in _refused(capsys, [*CPU, "--out", str(out), *flags])
    assert launches == [] and not out.exists()


def test_an_earlier_result_is_kept(tmp_path, capsys, launches) -> None:
    (tmp_path / "ddp_scaling.json").write_text("earlier")
    err = _refused(capsys, [*CPU, "--out", str(tmp_path)])
    assert "ddp_scaling.json exists; refusing to overwrite it" in err
    assert (tmp_path / "ddp_scaling.json").read_text() == "earlier" and launches == []


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys, launches) -> None:
    (tmp_path / "f").write_text("x")
    assert "is not a folder" in _refused(capsys, [*CPU, "--out", str(tmp_path / "f")])


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path, capsys, launches) -> None:
    err = _refused(capsys, ["--out", str(tmp_path / "out"), "--world-sizes", "1"])
    assert "no CUDA GPU is visible" in err and not (tmp_path / "out").exists()


def test_the_runs_are_written_and_exit_0(tmp_path, launches) -> None:
    assert ddp.main([*CPU, "--out", str(tmp_path)]) == 0
    assert launches == [("fa2", 1)]
    (run,) = json.loads((tmp_path / "ddp_scaling.json").read_text())["runs"]
    assert run["efficiency"] == 1.0


def test_a_failed_run_is_recorded_and_the_script_fails(tmp_path, capsys, monkeypatch) -> None:
    def failing(args, spec, world_size, result):  # type: ignore[no-untyped-def]
        return {"world_size": world_size, "spec": spec, "error": "exit 1", "output_tail": "boom"}

    monkeypatch.setattr(ddp, "launch", failing)
    assert ddp.main([*CPU, "--out", str(tmp_path)]) == 1
    assert "1 of 1 runs failed: fa2 on 1 rank(s) (exit 1)" in capsys.readouterr().err
    (run,) = json.loads((tmp_path / "ddp_scaling.json").read_text())["runs"]
    assert run["output_tail"] == "boom"
