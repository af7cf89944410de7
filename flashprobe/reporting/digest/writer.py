"""A result store → a digest (format: digest.schema, version 3).

For bringing results back from a device machine, where a whole store (deep folders, many
files, checkpoints) cannot travel: per cell its meta, config, environment, summary (a cut run:
its own record of its wall time and time by phase so far), the last logged step and the latest
checkpoint's, the first divergence the metrics recorded, a loss curve thinned to about one
record per `every` steps, every attention and spectral record reduced over heads, and its δ
replay's compact form (digest.replay) when `flashprobe replay` replayed its captures. A
replay.json (a cell's or the suite's) that cannot be read is a one-line FlashprobeError and no
digest is written, as `flashprobe report` and `replay` refuse the same store (run `flashprobe
replay --force`, or delete the file, to go on). What the store's reader finds wrong (corrupt,
repeated or missing metrics, a summary.json at odds with cell.json, a folder without cell.json)
goes into the digest's `notes`, as `flashprobe report` lists it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flashprobe import __version__
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.atomic import check_output_folder, write_text_atomic, write_text_new
from flashprobe.reporting.digest import replay as rp
from flashprobe.reporting.digest.schema import FORMAT, VERSION
from flashprobe.reporting.render import to_jsonable
from flashprobe.store import reader as sr
from flashprobe.store.metrics_check import store_notes
from flashprobe.store.replay_results import read_replay, read_suite_replay
from flashprobe.store.result_store import ENVIRONMENT_FILE, read_json
from flashprobe.store.suite_definition import read_suite_definition
from flashprobe.train.checkpoint import checkpoint_step, latest_checkpoint

DEFAULT_EVERY = 10


def build_digest(
    store: str | Path, *, every: int = DEFAULT_EVERY, suite: str | None = None
) -> dict[str, Any]:
    """The digest of a store (or of one suite of it) as a JSON-ready mapping."""
    if every < 1:
        raise FlashprobeError(f"--every must be a step count >= 1, got {every}")
    cells = sr.read_cells(store, suite)
    suites = {}
    for cell in cells:
        if cell.suite not in suites:
            suites[cell.suite] = read_suite_definition(sr.suite_dir(cell))
            read_suite_replay(sr.suite_dir(cell))  # checked as report reads it: damage stops
    from flashprobe.runner.plan import code_version

    return to_jsonable(
        {
            "format": FORMAT,
            "version": VERSION,
            "written_by": {"flashprobe": __version__, "code_version": code_version()},
            "store": str(store),
            "every": every,
            "suites": {k: v for k, v in suites.items() if v is not None},
            "cells": [digest_cell(cell, every) for cell in cells],
            # the store check `flashprobe report` lists: damaged metrics thin the loss curve
            "notes": store_notes(cells),
        }
    )


def write_digest(
    store: str | Path,
    out: str | Path,
    *,
    every: int = DEFAULT_EVERY,
    suite: str | None = None,
    force: bool = False,
    note: Callable[[str], None] | None = None,
) -> int:
    """Write the digest (strict JSON: NaN and inf are null) to `out`; refuses to replace an
    existing file unless `force`; `note` is told each of its notes. Returns the number of
    cells."""
    out = Path(out)
    if out.is_dir():
        raise FlashprobeError(f"digest output is a folder: {out}")
    # --force replaces OUT: never a file of the store being read (its suite.json, a cell's files)
    if out.resolve().is_relative_to(Path(store).resolve()):
        raise FlashprobeError(f"digest output {out} is inside the result store {store}")
    check_output_folder(out.parent, "digest output")
    if out.exists() and not force:
        raise FlashprobeError(f"{out} exists; refusing to overwrite it (--force replaces it)")
    digest = build_digest(store, every=every, suite=suite)
    text = json.dumps(digest, allow_nan=False, separators=(",", ":")) + "\n"
    (write_text_atomic if force else write_text_new)(out, text)
    for line in digest["notes"] if note else []:
        note(line)
    return len(digest["cells"])


def digest_cell(cell: sr.CellView, every: int) -> dict[str, Any]:
    records = sr.read_metrics(cell)
    divergence = next((r["divergence"] for r in records if r.get("divergence")), None)
    keep = {divergence.get("step")} if isinstance(divergence, Mapping) else set()
    summary_step = (cell.summary or {}).get("diverged_step")
    keep.add(summary_step)
    loss = [[r["step"], r.get("loss"), r.get("grad_norm")] for r in records if "loss" in r]
    path = cell.path / ENVIRONMENT_FILE
    environment = read_json(path) if path.is_file() else None
    if isinstance(environment, dict) and (digest := cell.data_digest) is not None:
        environment = {**environment, "data_digest": digest}  # a cut run's too (no summary)
    return {
        "meta": cell.meta,
        "config": cell.config,
        "environment": environment,
        "started": cell.started or None,
        "summary": cell.summary,
        # a cut run's own record, where it wrote one: still unfinished (summary null)
        "interrupted": sr.read_interrupted(cell),
        "last_step": max((int(r.get("step", 0)) for r in records), default=None),
        "checkpoint_step": _checkpoint_step(cell),
        "divergence": divergence,
        "skipped_updates": sum(1 for r in records if r.get("skipped_update")),
        "loss": thin(loss, every, keep),
        "val_loss": [[r["step"], r["val_loss"]] for r in records if "val_loss" in r],
        "attention": [attention_record(r) for r in records if r.get("attention")],
        "spectral": [spectral_record(r) for r in records if r.get("spectral")],
        "replay": replay_entry(cell),
    }


def thin(rows: Sequence[Sequence[Any]], every: int, keep: Iterable[Any] = ()) -> list[Any]:
    """About one row per `every` steps: the first row, the first row of every later block of
    `every` steps (block (step + 1) // every: a run logging 0-based steps 9, 19, ... keeps
    each of them at every = 10), the last row and the rows at the `keep` steps."""
    keep = set(keep)
    out = []
    block = None
    for i, row in enumerate(rows):
        step = int(row[0])
        mine = (step + 1) // every
        if i == 0 or i == len(rows) - 1 or mine != block or step in keep:
            out.append(list(row))
            block = mine
    return out


def attention_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """Per layer, reduced over heads (None: no finite value, or not counted)."""
    layers = record["attention"].items()
    return {
        "step": record["step"],
        "max_logit": {k: _reduce(max, v.get("max_logit")) for k, v in layers},
        "tie_events": {k: _reduce(sum, v.get("tie_events")) for k, v in layers},
        "p_bar_ones": {k: _reduce(sum, v.get("p_bar_ones")) for k, v in layers},
        "key_shift_leak": {k: _reduce(max, v.get("key_shift_leak")) for k, v in layers},
        "softmax_sum_bias": {k: _reduce(statistics.fmean, v.get("softmax_sum_bias"))
                             for k, v in layers},
        "min_row_max": {k: _reduce(min, v.get("min_row_max")) for k, v in layers},
    }  # fmt: skip


def spectral_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """Per layer: the whole W_Q / W_K spectral norm and the largest head's."""
    spectral = record["spectral"]
    return {
        "step": record["step"],
        "wq": spectral.get("wq"),
        "wk": spectral.get("wk"),
        "wq_head_max": [_reduce(max, h) for h in spectral.get("wq_heads") or []] or None,
        "wk_head_max": [_reduce(max, h) for h in spectral.get("wk_heads") or []] or None,
    }


def replay_entry(cell: sr.CellView) -> dict[str, Any] | None:
    """The compact form of the cell's replay.json; None without one; a one-line
    FlashprobeError for one that cannot be read (older digests hold {"error": why} there)."""
    doc = read_replay(cell)
    if doc is None:
        return None
    try:
        return rp.compact(doc)
    except FlashprobeError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        why = " ".join(str(exc).split())
        raise FlashprobeError(
            f"corrupt replay results: {cell.replay_path}: not a replay this flashprobe reads "
            f"({why})"
        ) from None


def _checkpoint_step(cell: sr.CellView) -> int | None:
    """Steps done at the cell's latest checkpoint (a run cut by SIGINT checkpoints the very
    step it stopped at, after its last logged step)."""
    found = latest_checkpoint(cell.run_dir)
    return None if found is None else checkpoint_step(found)


def _reduce(how: Any, values: Sequence[float | None] | None) -> float | None:
    """how(values) over the finite ones; None when the metric is absent or has none."""
    if values is None:
        return None
    finite = [v for v in values if v is not None]
    return float(how(finite)) if finite else None
