from __future__ import annotations

from dataclasses import dataclass

import pytest

from flashprobe.cli import main


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """Run the console entry point in-process and capture its exit code and output."""

    def run(*args: str) -> CliResult:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
