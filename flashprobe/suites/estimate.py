"""What a suite costs before it runs: tokens to train, and time where a throughput was measured.

A suite may record measured throughputs (tokens/s of one process over its cells' wall time,
evaluation, metrics and checkpoints included, with the --jobs it ran under) in a `throughput:`
list:

    throughput:
      - {device: NVIDIA H200, jobs: 9, tokens_per_s: 95000}   # 9 processes side by side
      - {device: cpu, jobs: 1, tokens_per_s: 16000}            # 2 cores

`device` is matched against the machine's GPU name (or `cpu`) as a substring. Time = tokens /
(tokens_per_s × the processes that can run at once). An estimate, not a promise: throughput
depends on the kernels, the other processes and the host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flashprobe.errors import FlashprobeError
from flashprobe.suites.cell_config import resolve_cell_config

if TYPE_CHECKING:
    from flashprobe.suites.suite import Cell, Suite

THROUGHPUT_KEYS = ("device", "jobs", "tokens_per_s")


@dataclass(frozen=True)
class Throughput:
    """A measured training speed: tokens/s of one process, `jobs` processes side by side."""

    device: str
    jobs: int
    tokens_per_s: float

    def seconds(self, tokens: int, units: int) -> float:
        """Time for `tokens` split over `units` independent runs (cells or branch groups)."""
        parallel = max(1, min(self.jobs, units))
        return tokens / (self.tokens_per_s * parallel)

    def matches(self, device: str) -> bool:
        return self.device.lower() in device.lower()


def throughputs(suite: Suite) -> tuple[Throughput, ...]:
    """The suite's `throughput:` list, checked (a bad entry is a one-line error)."""
    raw = suite.raw.get("throughput")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise FlashprobeError("throughput must be a list of {device, jobs, tokens_per_s}")
    out = []
    for i, entry in enumerate(raw):
        where = f"throughput[{i}]"
        if not isinstance(entry, Mapping):
            raise FlashprobeError(f"{where} must be a mapping with {', '.join(THROUGHPUT_KEYS)}")
        unknown = sorted(set(entry) - set(THROUGHPUT_KEYS))
        if unknown:
            raise FlashprobeError(
                f"{where}: unknown key {unknown[0]!r}; known: {', '.join(THROUGHPUT_KEYS)}"
            )
        device, jobs, speed = entry.get("device"), entry.get("jobs", 1), entry.get("tokens_per_s")
        if not isinstance(device, str) or not device:
            raise FlashprobeError(f"{where}.device must be a device name such as 'NVIDIA H200'")
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise FlashprobeError(f"{where}.jobs must be an integer >= 1, got {jobs!r}")
        if (
            isinstance(speed, bool)
            or not isinstance(speed, int | float)
            or not math.isfinite(speed)
            or speed <= 0
        ):
            raise FlashprobeError(f"{where}.tokens_per_s must be a number > 0, got {speed!r}")
        out.append(Throughput(device, jobs, float(speed)))
    return tuple(out)


def tokens_per_step(config: Mapping[str, Any]) -> int:
    """Training tokens of one optimizer step of a cell config (sequences × block size)."""
    train = resolve_cell_config(config).train
    return train.train.batch_size * train.model.block_size


def cell_tokens(cell: Cell, first_step: int | None = None) -> int:
    """Tokens a cell trains from `first_step` (default: its branch step, or 0) to its end."""
    start = first_step if first_step is not None else (cell.branch_step or 0)
    steps = resolve_cell_config(cell.config).train.train.steps
    return max(0, steps - start) * tokens_per_step(cell.config)


def suite_tokens(suite: Suite) -> int:
    """Tokens to train every cell of a suite from scratch (a branched cell from its branch)."""
    return sum(cell_tokens(c) for c in suite.cells)


def parallel_units(cells: Sequence[Cell]) -> int:
    """How many runs can train at once: cells, or (grid point, seed) groups when branched."""
    if any(c.branch_from for c in cells):
        return len({c.group for c in cells})
    return len(cells)


def machine_device() -> str:
    """This machine's device as throughputs name it: the first CUDA GPU's name, else 'cpu'."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def format_tokens(tokens: int) -> str:
    """1234567 → '1.2M'."""
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if tokens >= scale:
            return f"{tokens / scale:.3g}{unit}"
    return str(tokens)


def format_seconds(seconds: float) -> str:
    """A duration, rounded as an estimate should be: '40 s', '22 min', '3.2 h', '4.5 days'."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.2g} h"
    return f"{seconds / 86400:.2g} days"


def describe_times(
    tokens: int, units: int, known: Sequence[Throughput], device: str | None = None
) -> list[str]:
    """One phrase per measured throughput: '≈ 22 min on NVIDIA H200 with --jobs 9'; the one
    matching `device` (this machine) is marked."""
    out = []
    for t in known:
        here = " (this machine)" if device is not None and t.matches(device) else ""
        jobs = f" with --jobs {t.jobs}" if t.jobs > 1 else ""
        out.append(f"≈ {format_seconds(t.seconds(tokens, units))} on {t.device}{jobs}{here}")
    return out


def suite_cost(suite: Suite, device: str | None = None) -> dict[str, Any]:
    """A suite's size and cost as `flashprobe suites` lists it."""
    tokens = suite_tokens(suite)
    known = throughputs(suite)
    return {
        "suite": suite.name,
        "variants": len(suite.variants()),
        "cells": len(suite.cells),
        "tokens": tokens,
        "time": "; ".join(describe_times(tokens, parallel_units(suite.cells), known, device))
        or None,
        "description": suite.description,
    }
