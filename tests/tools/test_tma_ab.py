"""tools/tma_ab.py: timing in alternation, and where it cannot run, one line and exit 2."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def load_tool():
    spec = importlib.util.spec_from_file_location("tma_ab", ROOT / "tools" / "tma_ab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_alternate_times_the_functions_in_turn_and_keeps_each_ones_median(monkeypatch) -> None:
    from flashprobe.kernels import autotune

    calls: list[str] = []
    fake = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 9.0, 4.0])}

    def time_ms(fn) -> float:
        name = fn()
        calls.append(name)
        return next(fake[name])

    monkeypatch.setattr(autotune, "time_ms", time_ms)
    ms = load_tool().alternate({"a": lambda: "a", "b": lambda: "b"}, rounds=3)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert ms == {"a": 2.0, "b": 5.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seq", "1000"], "--seq must divide 32768"),
        (["--rounds", "0"], "--rounds be ≥ 1"),
        *([] if torch.cuda.is_available() else [([], "needs a CUDA GPU")]),
    ],
)
def test_tma_ab_refuses_in_one_line_before_writing(tmp_path, args, message) -> None:
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "tools/tma_ab.py", "--out", str(out), *args],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not out.exists()
