"""Cells and their training output read back from the result store (layout: store.result_store).

Per cell STORE/<suite>/<variant>--<key>/: cell.json, config.json and summary.json (through
ResultStore), environment.json (its time only: when the cell started), run/metrics.jsonl
(per-step records; a torn last line is dropped) and run/interrupted.json (a cut run's steps, wall
time and time by phase). Reading never executes code: JSON only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe import json_io
from flashprobe.errors import FlashprobeError
from flashprobe.store.result_store import (
    ENVIRONMENT_FILE,
    CellRecord,
    ResultStore,
    check_suite_folder,
)
from flashprobe.suites.suite import meta_point, point_label
from flashprobe.train.run_state import INTERRUPTED

REPLAY_FILE = "replay.json"
METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True)
class CellView(CellRecord):
    """A cell as replay and report see it: the store's record plus what they read off it."""

    # cell.json's fields are checked (result_store._check_meta); absent and null read alike
    @property
    def suite(self) -> str:
        return str(self.meta.get("suite") or self.path.parent.name)

    @property
    def variant(self) -> str:
        return str(self.meta.get("variant") or self.path.name.split("--")[0])

    @property
    def seed(self) -> int:
        return int(self.meta.get("seed") or 0)

    @property
    def point(self) -> tuple[tuple[str, Any], ...]:
        return meta_point(self.meta)

    @property
    def point_label(self) -> str:
        return point_label(self.point)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def branch_from(self) -> str | None:
        value = self.meta.get("branch_from")
        return None if value is None else str(value)

    @property
    def run_dir(self) -> Path:
        # train_run's output lives in run/ (older stores: the cell folder itself)
        run = self.path / "run"
        return run if run.is_dir() or not (self.path / METRICS_FILE).is_file() else self.path

    @property
    def replay_path(self) -> Path:
        return self.path / REPLAY_FILE

    @property
    def data_digest(self) -> str | None:
        return read_data_digest(self)

    @property
    def started(self) -> float:
        """When the cell started (environment.json, written once; else cell.json), as a
        file time: orders the runs of one store."""
        for name in (ENVIRONMENT_FILE, "cell.json"):
            path = self.path / name
            if path.is_file():
                return path.stat().st_mtime
        return 0.0


def read_cells(root: str | Path, suite: str | None = None) -> list[CellView]:
    """Every cell of the store (or of one suite); one-line FlashprobeError when the store is
    missing, not a folder, empty or holds corrupt JSON."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise FlashprobeError(f"result store is not a folder: {root}")
    if not root.exists():
        raise FlashprobeError(f"result store not found: {root}")
    if suite is not None:
        check_suite_folder(suite)
    if suite is not None and not (root / suite).is_dir():
        known = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        hint = f"; suites here: {', '.join(known)}" if known else ""
        raise FlashprobeError(f"no suite {suite!r} in result store {root}{hint}")
    cells = [
        CellView(r.path, r.meta, r.config, r.summary, r.problems)
        for r in ResultStore(root).records(suite)
    ]
    for cell in cells:
        if not isinstance(cell.meta, Mapping) or not isinstance(cell.config, Mapping):
            raise FlashprobeError(f"corrupt cell files in result store: {cell.path}")
    if not cells:
        raise FlashprobeError(f"no cells in result store {root} (run `flashprobe ablate` first)")
    return cells


def suites_of(cells: list[CellView]) -> dict[str, list[CellView]]:
    out: dict[str, list[CellView]] = {}
    for cell in cells:
        out.setdefault(cell.suite, []).append(cell)
    return out


def suite_dir(cell: CellView) -> Path:
    return cell.path.parent


# -- training output ------------------------------------------------------------------------
def read_metrics(cell: CellView) -> list[dict[str, Any]]:
    """run/metrics.jsonl records ([] when absent): the lines that are well-formed records
    (`well_formed`), NaN restored (flashprobe.json_io). A corrupt line (a run killed mid-write
    tears the last one; a hand edit) is left out; store.metrics_check says which."""
    return scan_metrics(cell.run_dir / METRICS_FILE)[0]


def read_data_digest(cell: CellView) -> str | None:
    """The token stream's digest the cell's run trained on: its summary's
    environment.data_digest, else its run record's (run/config.json, written when training
    starts, so a cut run has it too). None for runs that record none (older stores, token
    folders) and for an unreadable record: unknown."""
    return data_digest_of(cell.summary) or recorded_digest(_run_record(cell.run_dir))


def data_digest_of(summary: Mapping[str, Any] | None) -> str | None:
    """A summary's environment.data_digest; None when it records none."""
    return recorded_digest((summary or {}).get("environment"))


def recorded_digest(record: Any) -> str | None:
    """The `data_digest` a mapping records (a summary's environment, a run record, a digest
    cell's environment); None when it is not a mapping or records none."""
    value = record.get("data_digest") if isinstance(record, Mapping) else None
    return value if isinstance(value, str) and value else None


def _run_record(run_dir: Path) -> Any:
    """run/config.json (train.run's record of the run), or None when absent or unreadable."""
    try:
        return json_io.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_interrupted(cell: CellView) -> dict[str, Any] | None:
    """What an unfinished cell's run recorded as it was cut short (run/interrupted.json,
    train.run_state.interrupted_record): steps_done, wall_time_s and time_by_phase_s so far.
    None for a finished cell (a record left by a cut it was resumed from), and for a run
    without one (killed outright) or with one that is unreadable or not of that shape."""
    path = cell.run_dir / INTERRUPTED
    if cell.finished or not path.is_file():
        return None
    try:
        record = json_io.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    phases = record.get("time_by_phase_s")
    shaped = (
        _is_int(record.get("steps_done"))
        and _number_or_none(record.get("wall_time_s"))
        and isinstance(phases, dict)
        and all(_number_or_none(v) for v in phases.values())
    )
    return record if shaped else None


def scan_metrics(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """(the good records, the 1-based numbers of the corrupt lines)."""
    if not path.is_file():
        return [], []
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise FlashprobeError(f"cannot read {path}: {exc.strerror}") from None
    records, corrupt = [], []
    for number, raw in enumerate(blob.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json_io.loads(raw.decode("utf-8"))
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            corrupt.append(number)
            continue
        if not well_formed(record):
            corrupt.append(number)
            continue
        records.append(record)
    return records, corrupt


_NUMBER_FIELDS = ("loss", "grad_norm", "lr", "tokens_per_s", "time_s", "val_loss")


def well_formed(record: Any) -> bool:
    """A metrics record the readers can use: a JSON object with an integer step, numbers (or
    null) where numbers go, and per-layer attention stats as {layer: {name: [value, ...]}}."""
    if not isinstance(record, dict) or not _is_int(record.get("step")):
        return False
    if any(not _number_or_none(record.get(k)) for k in _NUMBER_FIELDS):
        return False
    attention = record.get("attention")
    if attention is not None:
        if not isinstance(attention, dict):
            return False
        for layer, stats in attention.items():
            if not (str(layer).isdigit() and isinstance(stats, dict)):
                return False
            for values in stats.values():
                if not (isinstance(values, list) and all(map(_number_or_none, values))):
                    return False
    spectral = record.get("spectral")
    return spectral is None or isinstance(spectral, dict)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def attention_maxima(
    record: Mapping[str, Any], names: Sequence[str] = ("max_logit", "key_shift_leak")
) -> dict[str, float]:
    """One metrics record's largest value of each per-head attention metric over layers and
    heads (a name the record does not hold is left out)."""
    layers = (record.get("attention") or {}).values()
    out = {}
    for name in names:
        values = [v for layer in layers for v in layer.get(name) or [] if _finite(v)]
        if values:
            out[name] = float(max(values))
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)
