"""The exceptions users see as one line: bad input (exit code 2) and a run stopped short; and
argparse under the same rule, for the scripts and tools outside the typer CLI."""

from __future__ import annotations

import argparse
from typing import NoReturn


class FlashprobeError(ValueError):
    """Bad input: an unknown field, an impossible value, a missing file, a GPU-only option on CPU.

    The message is a single line naming the problem; the CLI prints it and exits with code 2.
    """


class RunStopped(Exception):
    """A run that stopped short of its job (Ctrl-C, a failed shard process or replay); what it
    finished is kept. The CLI prints the one-line message and exits with `exit_code` (1: failed,
    130: interrupted)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class OneLineParser(argparse.ArgumentParser):
    """argparse under the CLI's rule for bad input: one line on stderr, exit code 2 (argparse
    alone prints its usage block first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message.replace(chr(10), ' ')}\n")
