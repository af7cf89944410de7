"""Shards: one suite split over processes or machines on one store (`--shard K/N`, `--jobs N`).

Shard units are numbered in run order and shard K keeps the units whose number is K modulo N.
A unit is a (grid point, seed) group when the suite branches, so a branched cell runs in the
same process as its source, and a single cell when it does not, so independent runs spread over
every process. The N shards partition the cells. Processes share a store safely: every cell has
its own folder and every file is written atomically (`--jobs N` starts N processes with shards
0/N..N-1/N on one store: runner.parallel).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.runner.plan import run_order
from flashprobe.suites.suite import Cell, Suite


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard K/N` as (K, N), 0 <= K < N."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip(), flags=re.ASCII)
    if match is None:
        raise FlashprobeError(f"--shard must be K/N, e.g. 0/3 (shard 0 of 3), got {text!r}")
    index, count = int(match[1]), int(match[2])
    check_shard(index, count)
    return index, count


def check_shard(index: int, count: int) -> None:
    if count < 1:
        raise FlashprobeError(f"--shard {index}/{count}: N must be at least 1")
    if not 0 <= index < count:
        raise FlashprobeError(
            f"--shard {index}/{count}: K must be below N (0-based: 0..{count - 1})"
        )


def shard_numbers(cells: Sequence[Cell]) -> dict[str, int]:
    """Cell name → the number of its shard unit, units counted in run order from 0. A unit runs
    whole in one shard: the (grid point, seed) group when the suite branches (a branched cell
    starts from its source's checkpoint), else the cell alone."""
    ordered = run_order(cells)
    branched = any(c.branch_from for c in ordered)
    units: dict[Any, int] = {}
    return {
        c.name: units.setdefault(c.group if branched else (c.variant, c.group), len(units))
        for c in ordered
    }


def shard_of(cell: Cell, numbers: Mapping[str, int], count: int) -> int:
    """The shard (of `count`) that runs this cell: its unit's number modulo count."""
    return numbers[cell.name] % count


def select_shard(suite: Suite, index: int, count: int) -> Suite:
    """Shard `index` of `count`: the cells of units index, index + count, index + 2·count, ...
    (`shard_numbers`). A branched cell is in its source's unit, so both run in the same shard;
    the shards of one count partition the suite."""
    check_shard(index, count)
    numbers = shard_numbers(suite.cells)
    cells = tuple(c for c in suite.cells if shard_of(c, numbers, count) == index)
    return dataclasses.replace(suite, cells=cells)
