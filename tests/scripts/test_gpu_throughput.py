"""scripts/gpu_throughput.py: without a GPU, with bad settings or over an earlier result, it
stops before creating anything (one line, exit 2)."""

from __future__ import annotations

import pytest
import torch
from script_helpers import load_script, refused

throughput = load_script("gpu_throughput")


def _refused(capsys, argv: list[str]) -> str:
    return refused(throughput.main, capsys, argv, "gpu_throughput.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_no_gpu_is_one_line_and_creates_nothing(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert "needs a CUDA GPU" in _refused(capsys, ["--out", str(out)])
    assert not out.exists()


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys) -> None:
    (tmp_path / "f").write_text("x")
    assert "is not a folder" in _refused(capsys, ["--out", str(tmp_path / "f")])


def test_an_earlier_result_is_kept(tmp_path, capsys) -> None:
    (tmp_path / "throughput.json").write_text("earlier")
    err = _refused(capsys, ["--out", str(tmp_path)])
    assert "throughput.json exists; refusing to overwrite it" in err
    assert (tmp_path / "throughput.json").read_text() == "earlier"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "-1"], "--steps must be >= 1, got -1"),
        (["--steps", "5", "--warmup", "10"], "--steps 5 leaves no step after --warmup 10"),
        (["--kv-heads", "5"], "model.n_kv_head (5) must be a divisor of model.n_head"),
        (["--batch", "0"], "train.batch_size"),
    ],
)
def test_bad_settings_are_one_line(tmp_path, capsys, flags, message) -> None:
    assert message in _refused(capsys, ["--out", str(tmp_path / "out"), *flags])
    assert not (tmp_path / "out").exists()
