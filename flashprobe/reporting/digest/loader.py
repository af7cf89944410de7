"""load_digest: a digest file of any version (format: digest.schema) read into a Digest, its
fields' types checked; anything else is a one-line FlashprobeError."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flashprobe import json_io
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.replay import finite_number as _number
from flashprobe.reporting.digest.replay import parse as parse_replay
from flashprobe.reporting.digest.schema import (
    ATTENTION_FIELDS,
    FORMAT,
    SPECTRAL_FIELDS,
    VERSION,
    AttentionRecord,
    Digest,
    DigestCell,
    PerLayer,
    SpectralRecord,
)
from flashprobe.store.result_store import SUMMARY_TYPES

#: Version 1's positional attention record: [step, *these].
_V1_ATTENTION = ("max_logit", "tie_events", "key_shift_leak", "softmax_sum_bias", "min_row_max")
_V1_KEYS = {"meta", "summary", "loss", "val_loss", "max_logit", "wq_spectral", "qk_spectral",
            "tie_counts"}  # fmt: skip

_NULL = type(None)
_CONFIG_SECTIONS = ("model", "data", "optimizer", "schedule", "train", "divergence", "metrics",
                    "capture")  # fmt: skip
_TYPE_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list", Mapping: "an object", _NULL: "null"}  # fmt: skip
#: The fields the reports read, and the JSON types they must have where present (null only
#: where the writer may copy one: the store's reader takes it there in cell.json, summary.json
#: and config.json). A parent comes before its fields.
_DIGEST_TYPES: dict[str, tuple[type, ...]] = {
    "store": (str, _NULL),
    "every": (int, _NULL),
    "written_by": (Mapping, _NULL),
    "notes": (list, _NULL),
}
_CELL_TYPES: dict[str, tuple[type, ...]] = {
    "meta.suite": (str,),
    "meta.variant": (str,),
    "meta.seed": (int,),
    "meta.point": (list,),
    "meta.key": (str,),
    "meta.code_version": (str,),
    "meta.branch_from": (str, _NULL),
    "meta.branch_step": (int, _NULL),
    "meta.source_key": (str, _NULL),
    **{f"summary.{name}": (*types, _NULL) for name, types in SUMMARY_TYPES.items()},
    "summary.environment": (Mapping, _NULL),
    "summary.environment.data_digest": (str, _NULL),
    "environment": (Mapping, _NULL),
    "environment.data_digest": (str, _NULL),
    **{f"config.{section}": (Mapping, _NULL) for section in _CONFIG_SECTIONS},
    "interrupted": (Mapping, _NULL),
    "interrupted.steps_done": (int,),
    "interrupted.wall_time_s": (int, float, _NULL),
    "interrupted.time_by_phase_s": (Mapping,),
    "config.train.steps": (int,),
    "config.divergence.min_step": (int,),
    "divergence.step": (int,),
}


def load_digest(path: str | Path, order: int = 0) -> Digest:
    """Read a digest of any version; `order` is its place among the digests pooled (later
    counts as later when runs carry no start time)."""
    path = Path(path)
    data = json_io.read_json_file(path, "digest")
    try:
        return _parse(data, path, order)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        if isinstance(exc, FlashprobeError):
            raise
        raise FlashprobeError(f"not a flashprobe digest: {path} ({exc})") from None


def _parse(data: Any, path: Path, order: int) -> Digest:
    if isinstance(data, list):
        cells = tuple(_v1_cell(c, path, order, i) for i, c in enumerate(data))
        return Digest(path, 1, cells)
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise FlashprobeError(
            f"not a flashprobe digest: {path} (expected a list of cells, or an object with "
            f'"format": "{FORMAT}")'
        )
    version = data.get("version")
    if not isinstance(version, int) or version < 2:
        raise FlashprobeError(f"not a flashprobe digest: {path} (bad version {version!r})")
    if version > VERSION:
        raise FlashprobeError(
            f"digest {path} is format version {version}; this flashprobe reads up to {VERSION}"
        )
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise FlashprobeError(f"not a flashprobe digest: {path} (cells is not a list)")
    suites = data.get("suites") or {}
    if not isinstance(suites, Mapping):
        raise FlashprobeError(f"not a flashprobe digest: {path} (suites is not an object)")
    _check_types(data, _DIGEST_TYPES, "")
    for name, suite in suites.items():
        _check_type(suite, (Mapping,), f"suites.{name}")
    return Digest(
        path,
        version,
        tuple(_v2_cell(c, path, order, i, version) for i, c in enumerate(cells)),
        suites,
        data.get("every"),
    )


def _v2_cell(raw: Any, path: Path, order: int, index: int, version: int) -> DigestCell:
    """A cell of a v2 or later digest (v2 has no replay)."""
    cell = _cell_mapping(raw, path, index)
    attention = tuple(
        AttentionRecord(
            step=_step(r.get("step")),
            **{n: _per_layer(r.get(n), f"{n} of cell {index}") for n in ATTENTION_FIELDS},
        )
        for r in _records(cell.get("attention"), "attention", index, Mapping)
    )
    spectral = tuple(
        SpectralRecord(
            step=_step(r.get("step")),
            **{n: _layers(r.get(n), f"{n} of cell {index}") for n in SPECTRAL_FIELDS},
        )
        for r in _records(cell.get("spectral"), "spectral", index, Mapping)
    )
    known = {"meta", "config", "environment", "started", "summary", "interrupted", "last_step",
             "checkpoint_step", "divergence", "skipped_updates", "loss", "val_loss", "attention",
             "spectral", "replay"}  # fmt: skip
    return DigestCell(
        source=path,
        order=order,
        index=index,
        version=version,
        meta=cell["meta"],
        summary=_optional_mapping(cell.get("summary"), "summary", index),
        interrupted=_optional_mapping(cell.get("interrupted"), "interrupted", index),
        config=_optional_mapping(cell.get("config"), "config", index),
        environment=_optional_mapping(cell.get("environment"), "environment", index),
        started=_number(cell.get("started")),
        last_step=_optional_int(cell.get("last_step")),
        checkpoint_step=_optional_int(cell.get("checkpoint_step")),
        divergence=_optional_mapping(cell.get("divergence"), "divergence", index),
        skipped_updates=_optional_int(cell.get("skipped_updates")),
        loss=_loss(cell.get("loss"), index),
        val_loss=_val_loss(cell.get("val_loss"), index),
        attention=tuple(sorted(attention, key=lambda r: r.step)),
        spectral=tuple(sorted(spectral, key=lambda r: r.step)),
        replay=parse_replay(cell.get("replay"), f"cell {index}"),
        extra={k: v for k, v in cell.items() if k not in known},
    )


def _v1_cell(raw: Any, path: Path, order: int, index: int) -> DigestCell:
    cell = _cell_mapping(raw, path, index)
    attention: dict[int, dict[str, PerLayer]] = {}
    for row in _records(cell.get("max_logit"), "max_logit", index, list):
        values = attention.setdefault(_step(row[0]), {})
        for name, value in zip(_V1_ATTENTION, row[1:], strict=False):
            values[name] = _per_layer(value, f"max_logit of cell {index}")
    for row in _records(cell.get("tie_counts"), "tie_counts", index, list):
        values = attention.setdefault(_step(row[0]), {})
        pairs = row[1] if len(row) > 1 and isinstance(row[1], Mapping) else {}
        values["tie_events"] = {int(k): _number(v[0]) for k, v in pairs.items()}
        values["p_bar_ones"] = {int(k): _number(v[1]) for k, v in pairs.items()}
    spectral: dict[int, dict[str, Any]] = {}
    for row in _records(cell.get("wq_spectral"), "wq_spectral", index, list):
        spectral.setdefault(_step(row[0]), {})["wq_head_max"] = _layers(row[1], "wq_spectral")
    for row in _records(cell.get("qk_spectral"), "qk_spectral", index, list):
        values = spectral.setdefault(_step(row[0]), {})
        for name, value in zip(("wq", "wk", "wk_head_max"), row[1:], strict=False):
            values[name] = _layers(value, "qk_spectral")
    return DigestCell(
        source=path,
        order=order,
        index=index,
        version=1,
        meta=cell["meta"],
        summary=_optional_mapping(cell.get("summary"), "summary", index),
        loss=_loss(cell.get("loss"), index),
        val_loss=_val_loss(cell.get("val_loss"), index),
        attention=tuple(AttentionRecord(s, **v) for s, v in sorted(attention.items())),
        spectral=tuple(SpectralRecord(s, **v) for s, v in sorted(spectral.items())),
        extra={k: v for k, v in cell.items() if k not in _V1_KEYS},
    )


def _cell_mapping(raw: Any, path: Path, index: int) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("meta"), Mapping):
        raise FlashprobeError(f"not a flashprobe digest: {path} (cell {index} has no meta object)")
    if "variant" not in raw["meta"]:
        raise FlashprobeError(f"not a flashprobe digest: {path} (cell {index}'s meta: no variant)")
    _check_types(raw, _CELL_TYPES, f"cell {index}: ")
    for part in ("summary", "interrupted"):
        record = raw.get(part)
        done = record.get("steps_done") if isinstance(record, Mapping) else None
        if isinstance(done, int) and done < 0:
            raise ValueError(f"cell {index}: {part}.steps_done must be >= 0, not {done}")
    for pair in raw["meta"].get("point") or []:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"cell {index}: meta.point must be a list of [name, value] pairs")
    return raw


def _check_types(raw: Mapping[str, Any], types: Mapping[str, tuple[type, ...]], where: str) -> None:
    """Each dotted field present (under objects present) has one of its types (bool is not an
    integer)."""
    for name, allowed in types.items():
        *parents, key = name.split(".")
        value: Any = raw
        for part in parents:
            value = value.get(part) if isinstance(value, Mapping) else None
        if not isinstance(value, Mapping) or key not in value:
            continue
        _check_type(value[key], allowed, f"{where}{name}")


def _check_type(value: Any, allowed: tuple[type, ...], name: str) -> None:
    if not json_io.has_type(value, allowed):
        words = [_TYPE_WORDS[t] for t in allowed if not (t is int and float in allowed)]
        got = json.dumps(value, default=str)
        got = got if len(got) <= 40 else got[:37] + "..."
        raise ValueError(f"{name} must be {' or '.join(words)}, not {got}")


def _records(value: Any, name: str, index: int, kind: type) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(r, kind) for r in value):
        raise ValueError(f"cell {index}: {name} is not a list of records")
    if kind is list and any(not r for r in value):
        raise ValueError(f"cell {index}: {name} holds an empty record")
    return value


def _loss(value: Any, index: int) -> tuple[tuple[int, float | None, float | None], ...]:
    rows = _records(value, "loss", index, list)
    out = [(_step(r[0]), _number(_at(r, 1)), _number(_at(r, 2))) for r in rows]
    return tuple(sorted(out, key=lambda r: r[0]))


def _val_loss(value: Any, index: int) -> tuple[tuple[int, float | None], ...]:
    rows = _records(value, "val_loss", index, list)
    return tuple(sorted(((_step(r[0]), _number(_at(r, 1))) for r in rows), key=lambda r: r[0]))


def _at(row: Sequence[Any], i: int) -> Any:
    return row[i] if len(row) > i else None


def _step(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"bad step {value!r}")
    return int(value)


def _optional_int(value: Any) -> int | None:
    if value is None:
        return None
    return _step(value)


def _optional_mapping(value: Any, name: str, index: int) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"cell {index}: {name} is not an object")
    return value


def _per_layer(value: Any, where: str) -> PerLayer:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is not a per-layer object")
    return {int(k): _number(v) for k, v in value.items()}


def _layers(value: Any, where: str) -> tuple[float | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError(f"{where} is not a per-layer list")
    return tuple(_number(v) for v in value)
