"""Registers every command module with the Typer app (one module per command)."""

from flashprobe.cli import ablate_cmd, bench_cmd, bias_cmd, spec_cmd  # noqa: F401
