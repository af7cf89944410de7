"""Registers every command module with the Typer app (one module per command)."""

from flashprobe.cli import (  # noqa: F401
    ablate_cmd,
    bench_cmd,
    bias_cmd,
    digest_cmd,
    logit_scale_cmd,
    replay_cmd,
    report_cmd,
    spec_cmd,
    suites_cmd,
)
