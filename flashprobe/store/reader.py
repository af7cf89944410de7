"""The one place replay and report read result-store files (layout: store.result_store).

Everything that knows where a cell keeps its training output, captures and replay results is
here, so a layout change is one edit. Reading never executes code: JSON and safetensors only.

Files this module reads, per cell STORE/<suite>/<variant>--<key>/:
    cell.json, config.json, summary.json         (through ResultStore)
    environment.json                             its time only: when the cell started
    run/metrics.jsonl                            per-step records (a torn last line is dropped)
    run/interrupted.json                         a cut run's steps, wall time and time by phase
    run/captures/step_<t>.safetensors, manifest.json
    replay.json                                  written by attribution.replay
and per suite STORE/<suite>/replay.json (the replay's roles and variants, also written here) and
STORE/<suite>/suite.json (the suite as `flashprobe ablate` last ran it; see suite_roles).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from flashprobe import json_io
from flashprobe.errors import FlashprobeError
from flashprobe.store.result_store import (
    ENVIRONMENT_FILE,
    SUITE_FILE,
    CellRecord,
    ResultStore,
    check_suite_folder,
    read_json,
    write_json,
)
from flashprobe.suites.suite import meta_point, point_label
from flashprobe.train.run_state import INTERRUPTED

REPLAY_FILE = "replay.json"
CAPTURE_SUBDIR = "captures"
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
    tears the last one; a hand edit) is left out; `metrics_problems` says which."""
    return _scan_metrics(cell.run_dir / METRICS_FILE)[0]


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


def _scan_metrics(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
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


def metrics_problems(cell: CellView) -> list[str]:
    """What is wrong with a cell's run/metrics.jsonl: corrupt lines (but an unfinished run's
    torn last line), steps logged twice or out of order, logged steps missing (by the config's
    metrics.log_every, from the run's first step to its summary's steps_done), records past
    steps_done, a finished run with no records."""
    path = cell.run_dir / METRICS_FILE
    records, corrupt = _scan_metrics(path)
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


def capture_files(cell: CellView) -> list[tuple[int, Path]]:
    """(step, file) of every capture the cell holds, in step order."""
    folder = cell.run_dir / CAPTURE_SUBDIR
    out = []
    for path in folder.glob("step_*.safetensors"):
        try:
            out.append((int(path.stem.split("_")[-1]), path))
        except ValueError:
            continue
    return sorted(out)


@dataclass(frozen=True)
class Capture:
    step: int
    tensors: dict[str, torch.Tensor]
    metadata: dict[str, str]

    @property
    def layers(self) -> list[int]:
        found = {int(k.split(".")[0].removeprefix("layer")) for k in self.tensors if "." in k}
        return sorted(found)

    def layer(self, layer: int, name: str) -> torch.Tensor | None:
        return self.tensors.get(f"layer{layer}.{name}")

    @property
    def causal(self) -> bool:
        return self.metadata.get("causal", "true").lower() != "false"

    @property
    def softmax_scale(self) -> float | None:
        try:
            value = float(self.metadata["softmax_scale"])
        except (KeyError, ValueError):
            return None
        return value if math.isfinite(value) else None


def load_capture(step: int, path: Path) -> Capture:
    """Read one capture file (safetensors: no code runs while loading)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise FlashprobeError(f"corrupt capture file {path}: {type(exc).__name__}") from None
    return Capture(step=step, tensors=tensors, metadata=metadata)


@dataclass(frozen=True)
class CaptureHeader:
    """A capture file's tensor shapes and metadata, read from its header (no tensor data)."""

    step: int
    shapes: dict[str, tuple[int, ...]]
    metadata: dict[str, str]

    @property
    def layers(self) -> list[int]:
        return sorted({int(k.split(".")[0].removeprefix("layer")) for k in self.shapes if "." in k})

    def shape(self, layer: int, name: str) -> tuple[int, ...] | None:
        return self.shapes.get(f"layer{layer}.{name}")

    @property
    def causal(self) -> bool:
        return self.metadata.get("causal", "true").lower() != "false"


def read_capture_header(step: int, path: Path) -> CaptureHeader:
    """The shapes and metadata of one capture file (safetensors header only)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            shapes = {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise FlashprobeError(f"corrupt capture file {path}: {type(exc).__name__}") from None
    return CaptureHeader(step=step, shapes=shapes, metadata=metadata)


# -- replay results -------------------------------------------------------------------------
def read_replay(cell: CellView) -> dict[str, Any] | None:
    return _read_replay_file(cell.replay_path)


def write_replay(cell: CellView, data: Mapping[str, Any]) -> Path:
    write_json(cell.replay_path, data)
    return cell.replay_path


def read_suite_replay(folder: Path) -> dict[str, Any] | None:
    return _read_replay_file(folder / REPLAY_FILE)


def write_suite_replay(folder: Path, data: Mapping[str, Any]) -> Path:
    write_json(folder / REPLAY_FILE, data)
    return folder / REPLAY_FILE


def _read_replay_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise FlashprobeError(f"corrupt replay results: {path}")
    problem = _replay_shape_problem(data)
    if problem is not None:
        raise FlashprobeError(f"corrupt replay results: {path}: {problem}")
    return data


_NUMBER = (int, float)
#: replay.json fields (a cell's and a suite's) that readers rely on, and their JSON types: a
#: str field may be null, the others are absent or of their type. Lists: (list, item types).
_REPLAY_TYPES: dict[str, tuple[type, ...]] = {
    "source_cell": (str,), "source_variant": (str,), "backend": (str,), "key": (str,),
    "weight_gradient": (str,), "seed": (int,), "point": (list,), "captures": (list,),
    "records": (list,), "series": (list,), "summary": (dict,), "roles": (dict,),
    "untrained_variants": (dict,),
}  # fmt: skip
_REPLAY_LISTS: dict[str, tuple[type, ...]] = {
    "notes": (str,), "steps": (int,), "layers": (int,), "sources": (str,), "variants": (str,),
}  # fmt: skip
#: What every record and series row is keyed by; its other values are numbers (or null), a
#: series' also lists of numbers.
_ROW_KEYS: dict[str, tuple[type, ...]] = {"variant": (str,), "layer": (int,), "head": (int,)}


def _replay_shape_problem(data: Mapping[str, Any]) -> str | None:
    """What in a replay.json is not of the shape attribution.replay writes (None: nothing)."""
    for key, types in _REPLAY_TYPES.items():
        value = data.get(key)
        if key in data and not (value is None and str in types) and not _is(value, types):
            return _wrong(key, value, types)
    for key, types in _REPLAY_LISTS.items():
        if key in data:
            problem = _list_problem(key, data[key], types)
            if problem is not None:
                return problem
    for key in ("records", "series"):
        for i, row in enumerate(data.get(key) or []):
            problem = _row_problem(f"{key}[{i}]", row, lists=key == "series")
            if problem is not None:
                return problem
    for variant, row in (data.get("summary") or {}).items():
        if not isinstance(row, dict):
            return _wrong(f"summary.{variant}", row, (dict,))
    roles = data.get("roles") or {}
    for key, types in (("baseline", (str,)), ("safe", (str,)), ("components", (dict,))):
        value = roles.get(key)
        if value is not None and not _is(value, types):
            return _wrong(f"roles.{key}", value, types)
    return None


def _row_problem(where: str, row: Any, lists: bool) -> str | None:
    if not isinstance(row, dict):
        return _wrong(where, row, (dict,))
    for key, types in _ROW_KEYS.items():
        if not _is(row.get(key), types):
            return _wrong(f"{where}.{key}", row.get(key), types)
    for key, value in row.items():
        if key in _ROW_KEYS or value is None or _is(value, (*_NUMBER, bool)):
            continue
        if not (lists and isinstance(value, list)):
            return _wrong(f"{where}.{key}", value, _NUMBER)
        problem = _list_problem(f"{where}.{key}", value, _NUMBER, nullable=True)
        if problem is not None:
            return problem
    return None


def _list_problem(
    where: str, value: Any, types: tuple[type, ...], nullable: bool = False
) -> str | None:
    if not isinstance(value, list):
        return _wrong(where, value, (list,))
    for item in value:
        if not (_is(item, types) or (nullable and item is None)):
            return f"{where} holds {type(item).__name__} {item!r:.40}, expected {types[0].__name__}"
    return None


def _is(value: Any, types: tuple[type, ...]) -> bool:
    return json_io.has_type(value, types)


def _wrong(where: str, value: Any, types: tuple[type, ...]) -> str:
    return f"{where} is {type(value).__name__} {value!r:.40}, expected {types[0].__name__}"


# -- the suite definition -------------------------------------------------------------------
def read_suite_definition(folder: Path) -> dict[str, Any] | None:
    """STORE/<suite>/suite.json (written by `flashprobe ablate`), or None when absent."""
    path = Path(folder) / SUITE_FILE
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise FlashprobeError(f"corrupt suite definition: {path}")
    return data


def suite_failure(folder: Path) -> Any:
    """The `failure:` section of suite.json (attribution.failure), None when absent."""
    return (read_suite_definition(folder) or {}).get("failure")


def suite_roles(folder: Path) -> dict[str, Any] | None:
    """The roles a suite declares in suite.json: baseline, safe and components from its
    `replay:` section; without one (or without replay.baseline) the baseline is branch.from.
    None when there is no suite.json; keys with no declared value are None / {}."""
    raw = read_suite_definition(folder)
    if raw is None:
        return None
    replay = raw.get("replay")
    replay = replay if isinstance(replay, Mapping) else {}
    branch = raw.get("branch")
    source = branch.get("from") if isinstance(branch, Mapping) else None
    baseline = replay.get("baseline") if replay.get("baseline") is not None else source
    components = replay.get("components")
    return {
        "baseline": None if baseline is None else str(baseline),
        "safe": None if replay.get("safe") is None else str(replay["safe"]),
        "components": (
            {str(k): str(v) for k, v in components.items()}
            if isinstance(components, Mapping)
            else {}
        ),
    }
