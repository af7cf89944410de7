"""Store checks: what is wrong with a cell's run/metrics.jsonl, and the notes report and digest
print for inconsistent cells and for suite folders that are not cells."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from flashprobe.store.reader import METRICS_FILE, CellView, scan_metrics, suite_dir


def metrics_problems(cell: CellView) -> list[str]:
    """What is wrong with a cell's run/metrics.jsonl: corrupt lines (but an unfinished run's
    torn last line), steps logged twice or out of order, logged steps missing (by the config's
    metrics.log_every, from the run's first step to its summary's steps_done), records past
    steps_done, a finished run with no records."""
    path = cell.run_dir / METRICS_FILE
    records, corrupt = scan_metrics(path)
    name = str(path.relative_to(cell.path))
    problems = []
    if corrupt and not cell.finished and path.is_file():
        last = len(path.read_bytes().rstrip(b"\n").split(b"\n"))
        corrupt = [n for n in corrupt if n != last]  # the kill's torn line, redone on resume
    if corrupt:
        problems.append(f"{name}: {_count(len(corrupt), 'corrupt line')} ({_first(corrupt)})")
    steps = [r["step"] for r in records]
    repeated = sorted({s for s in steps if steps.count(s) > 1})
    if repeated:
        twice = _count(len(repeated), "step")
        problems.append(f"{name}: {twice} logged twice ({_first(repeated)})")
    if any(b < a for a, b in itertools.pairwise(steps)):
        problems.append(f"{name}: steps out of order")
    metrics = cell.config.get("metrics") or {}
    every = metrics.get("log_every", 1)
    done = (cell.summary or {}).get("steps_done")
    end = done if isinstance(done, int) else (max(steps) + 1 if steps else None)
    if cell.finished and not records and isinstance(done, int) and done > 0 and every == 1:
        problems.append(f"{name}: empty, but summary.json says {done} steps were done")
    elif end is not None and isinstance(every, int) and every > 0:
        start = cell.meta.get("branch_step") or 0
        count, first = _missing_steps(start, end, every, set(steps))
        if count and records:
            problems.append(f"{name}: {_count(count, 'step')} missing ({_first(first, count)})")
        beyond = [s for s in steps if s >= end]
        if beyond and isinstance(done, int):
            problems.append(f"{name}: steps past summary.json's steps_done {done} ({beyond[0]})")
    return problems


def store_notes(cells: Sequence[CellView], shown: int = 10) -> list[str]:
    """One note per inconsistent cell (summary.json and metrics checks), at most `shown`, then
    one per folder of their suites that is not a cell (`unread_notes`)."""
    found = []
    for cell in cells:
        problems = [*cell.problems, *metrics_problems(cell)]
        if problems:
            found.append(f"store check: {cell.name}: {'; '.join(problems)}")
    if len(found) > shown:
        found = [*found[:shown], f"store check: and {len(found) - shown} more cells"]
    return [*found, *unread_notes(cells)]


#: Folders of a suite that are not cells: `ablate --jobs`'s shard logs (runner.parallel.LOG_DIR).
NOT_CELLS = ("logs",)


def unread_notes(cells: Sequence[CellView]) -> list[str]:
    """One note per folder of these cells' suites that holds no cell.json: read_cells skips it,
    so its results would vanish from replay, report and digest without a word."""
    notes = []
    for folder in dict.fromkeys(suite_dir(c) for c in cells):
        for path in sorted(p for p in folder.iterdir() if p.is_dir()):
            if path.name not in NOT_CELLS and not (path / "cell.json").is_file():
                notes.append(f"store check: {path}: no cell.json, so not read as a cell")
    return notes


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _first(values: Sequence[int], total: int | None = None, shown: int = 3) -> str:
    head = ", ".join(str(v) for v in values[:shown])
    return f"first: {head} ..." if (total or len(values)) > shown else head


def _missing_steps(start: int, end: int, every: int, logged: set[int]) -> tuple[int, list[int]]:
    """(how many, the first three) of the steps in [start, end) a run logs (every `every`-th,
    and the last) that are not in `logged`; counted, not listed (a summary may claim 10**30)."""
    last = end - 1
    first_due = start + (every - 1 - start) % every  # the first s >= start with (s+1) % every == 0
    due = max(0, (last - first_due) // every + 1) if first_due <= last else 0
    extra = last >= start and (last + 1) % every != 0
    present = sum(start <= s < end and ((s + 1) % every == 0 or s == last) for s in logged)
    first, step = [], first_due
    while len(first) < 3 and step <= last:  # at most len(logged) + 3 turns
        if step not in logged:
            first.append(step)
        step += every
    if extra and last not in logged and len(first) < 3:
        first.append(last)
    return due + extra - present, first
