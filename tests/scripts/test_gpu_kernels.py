"""scripts/gpu_kernels.py: without a GPU, or over earlier results, it stops before creating
anything (one line, exit 2)."""

from __future__ import annotations

import pytest
import torch
from script_helpers import load_script, refused

gpu_kernels = load_script("gpu_kernels")


def _refused(capsys, argv: list[str]) -> str:
    return refused(gpu_kernels.main, capsys, argv, "gpu_kernels.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_no_gpu_is_one_line_and_creates_nothing(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert "needs a CUDA GPU" in _refused(capsys, ["--out", str(out)])
    assert not out.exists()


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys) -> None:
    (tmp_path / "f").write_text("x")
    assert "is not a folder" in _refused(capsys, ["--out", str(tmp_path / "f")])
    assert (tmp_path / "f").read_text() == "x"


@pytest.mark.parametrize(
    ("name", "flags"),
    [("bench.json", []), ("gpu_tests.log", ["--no-grid"]), ("tune_log.json", ["--tune"])],
)
def test_earlier_results_in_out_are_kept(tmp_path, capsys, name, flags) -> None:
    (tmp_path / name).write_text("earlier")
    assert f"{name} exists; refusing to overwrite it" in _refused(
        capsys, ["--out", str(tmp_path), *flags]
    )
    assert (tmp_path / name).read_text() == "earlier"
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_result_this_call_does_not_write_is_no_obstacle(tmp_path) -> None:
    args = gpu_kernels.argparse.Namespace(out=tmp_path, no_tests=True, tune=False, no_grid=False)
    assert gpu_kernels.result_files(args) == [tmp_path / "bench.json"]
    args.tune, args.no_grid = True, True
    assert gpu_kernels.result_files(args, "sm90") == [tmp_path / "tune_log.json",
                                                      tmp_path / "sm90.json"]  # fmt: skip


def test_bad_counts_are_one_line(tmp_path, capsys) -> None:
    assert "--repeats must be >= 1" in _refused(capsys, ["--out", str(tmp_path), "--repeats", "0"])
    assert "--seqs must be >= 1" in _refused(capsys, ["--out", str(tmp_path), "--seqs", "-4"])
