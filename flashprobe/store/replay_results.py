"""Replay results on disk: a cell's and a suite's replay.json (written by attribution.replay),
read and written here; a file not of the shape attribution.replay writes is a one-line error."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flashprobe import json_io
from flashprobe.errors import FlashprobeError
from flashprobe.store.reader import REPLAY_FILE, CellView
from flashprobe.store.result_store import read_json, write_json

#: What every replay.json attribution.replay writes holds (since its first format): a file
#: without one of them (`{}`, a hand-made or foreign file) is as corrupt as one of the wrong type.
CELL_REQUIRED = ("format", "source_cell", "steps", "records")
SUITE_REQUIRED = ("format", "roles", "variants", "summary")


def read_replay(cell: CellView) -> dict[str, Any] | None:
    return _read_replay_file(cell.replay_path, CELL_REQUIRED)


def write_replay(cell: CellView, data: Mapping[str, Any]) -> Path:
    write_json(cell.replay_path, data)
    return cell.replay_path


def read_suite_replay(folder: Path) -> dict[str, Any] | None:
    return _read_replay_file(folder / REPLAY_FILE, SUITE_REQUIRED)


def write_suite_replay(folder: Path, data: Mapping[str, Any]) -> Path:
    write_json(folder / REPLAY_FILE, data)
    return folder / REPLAY_FILE


def _read_replay_file(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        raise FlashprobeError(f"corrupt replay results: {path}")
    absent = [key for key in required if key not in data]
    if absent:
        raise FlashprobeError(f"corrupt replay results: {path}: no {', '.join(absent)}")
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
