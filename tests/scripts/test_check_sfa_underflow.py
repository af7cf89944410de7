"""scripts/check_sfa_underflow.py takes no options: others are one line and exit 2."""

from __future__ import annotations

import pytest
from script_helpers import load_script

check = load_script("check_sfa_underflow")


@pytest.mark.parametrize("argv", [["--bogus"], ["extra"], ["--out", "x"]])
def test_an_unknown_argument_is_one_line_and_nothing_runs(capsys, argv) -> None:
    with pytest.raises(SystemExit) as exited:
        check.main(argv)
    captured = capsys.readouterr()
    assert exited.value.code == 2 and captured.out == ""
    assert captured.err.startswith("check_sfa_underflow.py: error: unrecognized arguments")
    assert len(captured.err.strip().splitlines()) == 1


def test_help_prints_the_usage_and_runs_nothing(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        check.main(["--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0 and out.startswith("usage: check_sfa_underflow.py [-h]")
    assert "triton_finite" not in out  # the table was not printed


def test_it_prints_the_emulator_table() -> None:
    """Without a CUDA GPU: the emulator's column, as docs/results/*-cpu.txt."""
    assert check.main([]) == 0
