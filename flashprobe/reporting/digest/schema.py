"""The digest format and its loader (every version).

Version 3 (written by digest.writer), strict JSON (a non-finite number is null):

    {"format": "flashprobe-digest", "version": 3,
     "written_by": {"flashprobe": "0.1.0", "code_version": "..."},
     "store": "/tmp/adamw", "every": 10,
     "suites": {"quick": {...suite.json: the suite as ablate ran it...}},
     "cells": [
       {"meta": {...cell.json...}, "config": {...config.json...},
        "environment": {...environment.json...}, "started": 1733100000.0,
        "summary": {...summary.json...} | null (unfinished),
        "interrupted": {"steps_done": 2370, "wall_time_s": 301.2,   # a cut run's own record
                        "time_by_phase_s": {"train": 280.5, ...}} | null,  # (finished: null;
                                                # absent in digests written before it was added)
        "last_step": 2369,                      # the last step in metrics.jsonl (0-based)
        "checkpoint_step": 2370,                # steps done at the latest checkpoint | null
        "divergence": {"step": 1755, "rule": "rise", "detail": "..."} | null,
        "skipped_updates": 0,
        "loss": [[step, loss, grad_norm], ...],   # thinned: about one record per `every` steps
        "val_loss": [[step, val_loss], ...],
        "attention": [{"step": 99, "max_logit": {"0": 8.9, ...}, "tie_events": {...},
                       "p_bar_ones": {...}, "key_shift_leak": {...},
                       "softmax_sum_bias": {...}, "min_row_max": {...}}, ...],
        "spectral": [{"step": 99, "wq": [...], "wk": [...], "wq_head_max": [...],
                      "wk_head_max": [...]}, ...],
        "replay": {...} | null}],   # the run's δ replay, compact (digest.replay); null: none
     "notes": ["store check: ...", ...]}   # what the store's reader found wrong (absent in
                                           # digests written before it was added)

    Per layer (keyed by the 0-based layer index): max_logit, key_shift_leak: the largest over
    heads; tie_events, p_bar_ones: summed over heads (null: the attention does not count them,
    sdpa / math); softmax_sum_bias: the mean ΣP − 1 over heads; min_row_max: the smallest over
    heads. wq / wk: each layer's whole W_Q / W_K spectral norm; *_head_max: its largest head's.

A merged digest (`flashprobe digest-merge`, digest.merge) is the same format with
`"written_by": {..., "merged": true}`, `store` and `every` null where its inputs differ, and
`"merged_from": [{"file": ..., "written_by": ..., "cells": n}, ...]`.

Version 2 is version 3 without `replay`: its runs may have been replayed, the digest does not say.

Version 1 (the former scripts/store_digest.py): a bare list of cells with `meta`,
`summary`, `loss`, `val_loss`, `max_logit` ([step, max logit, ties, leak, ΣP − 1, min row max]
per record, the later fields absent in older files), `wq_spectral` ([step, largest W_Q head per
layer]) and, in the latest, `qk_spectral` ([step, wq, wk, largest W_K head]) and `tie_counts`
([step, {layer: [ties, P̄ = 1]}]). It has no config, start time, last step or checkpoint step: a cut
run's steps reached are its last recorded step + 1, and NaN may appear as a bare token.

`load_digest` reads every version into DigestCells; anything else is a one-line FlashprobeError.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashprobe import json_io
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.replay import ReplayDigest
from flashprobe.reporting.digest.replay import finite_number as _number
from flashprobe.reporting.digest.replay import parse as parse_replay
from flashprobe.store.result_store import SUMMARY_TYPES
from flashprobe.suites.cell_config import horizon
from flashprobe.suites.suite import meta_point, point_label

FORMAT = "flashprobe-digest"
VERSION = 3
#: Per-layer attention quantities a record may hold (digest v2 names).
ATTENTION_FIELDS = (
    "max_logit",
    "tie_events",
    "p_bar_ones",
    "key_shift_leak",
    "softmax_sum_bias",
    "min_row_max",
)
SPECTRAL_FIELDS = ("wq", "wk", "wq_head_max", "wk_head_max")
#: Version 1's positional attention record: [step, *these].
_V1_ATTENTION = ("max_logit", "tie_events", "key_shift_leak", "softmax_sum_bias", "min_row_max")
_V1_KEYS = {"meta", "summary", "loss", "val_loss", "max_logit", "wq_spectral", "qk_spectral",
            "tie_counts"}  # fmt: skip

PerLayer = dict[int, float | None]


@dataclass(frozen=True)
class AttentionRecord:
    """One step's per-layer attention statistics (a quantity absent from the digest: {})."""

    step: int
    max_logit: PerLayer = field(default_factory=dict)
    tie_events: PerLayer = field(default_factory=dict)
    p_bar_ones: PerLayer = field(default_factory=dict)
    key_shift_leak: PerLayer = field(default_factory=dict)
    softmax_sum_bias: PerLayer = field(default_factory=dict)
    min_row_max: PerLayer = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step}
        for name in ATTENTION_FIELDS:
            out[name] = {str(k): v for k, v in getattr(self, name).items()}
        return out


@dataclass(frozen=True)
class SpectralRecord:
    """One step's per-layer spectral norms (a series absent from the digest: None)."""

    step: int
    wq: tuple[float | None, ...] | None = None
    wk: tuple[float | None, ...] | None = None
    wq_head_max: tuple[float | None, ...] | None = None
    wk_head_max: tuple[float | None, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, **{n: _list(getattr(self, n)) for n in SPECTRAL_FIELDS}}


@dataclass(frozen=True)
class DigestCell:
    """One run as a digest holds it, and where it came from (file, its place in the
    arguments, its place in the file)."""

    source: Path
    order: int
    index: int
    version: int
    meta: Mapping[str, Any]
    summary: Mapping[str, Any] | None
    config: Mapping[str, Any] | None = None
    #: A cut run's record of itself (steps_done, wall_time_s, time_by_phase_s so far; v3 from
    #: when it was added): the cell stays unfinished.
    interrupted: Mapping[str, Any] | None = None
    environment: Mapping[str, Any] | None = None
    started: float | None = None
    last_step: int | None = None
    checkpoint_step: int | None = None
    divergence: Mapping[str, Any] | None = None
    skipped_updates: int | None = None
    loss: tuple[tuple[int, float | None, float | None], ...] = ()
    val_loss: tuple[tuple[int, float | None], ...] = ()
    attention: tuple[AttentionRecord, ...] = ()
    spectral: tuple[SpectralRecord, ...] = ()
    replay: ReplayDigest | None = None  # v3: the run's δ replay, when it was replayed
    extra: Mapping[str, Any] = field(default_factory=dict)  # other keys (v1 notes: lr, probe)

    @property
    def suite(self) -> str:
        return str(self.meta.get("suite", "?"))

    @property
    def variant(self) -> str:
        return str(self.meta.get("variant", "?"))

    @property
    def seed(self) -> int:
        return int(self.meta.get("seed", 0))

    @property
    def point(self) -> tuple[tuple[str, Any], ...]:
        return meta_point(self.meta)

    @property
    def point_label(self) -> str:
        return point_label(self.point)

    @property
    def key(self) -> str | None:
        key = self.meta.get("key")
        return None if key is None else str(key)

    @property
    def name(self) -> str:
        """The cell as the store named it (variant--key)."""
        return f"{self.variant}--{self.key}" if self.key else self.variant

    @property
    def label(self) -> str:
        point = f" [{self.point_label}]" if self.point else ""
        return f"{self.variant}{point} seed {self.seed}"

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def planned_steps(self) -> int | None:
        """train.steps of the cell config (None: the digest has no config)."""
        if self.config is None:
            return None
        return horizon(self.config) or None

    @property
    def diverged_step(self) -> int | None:
        """The summary's divergence step, else the divergence the metrics recorded (a run cut
        after it diverged)."""
        if self.summary and self.summary.get("diverged"):
            step = self.summary.get("diverged_step")
            if isinstance(step, int):
                return step
        if self.divergence and isinstance(self.divergence.get("step"), int):
            return int(self.divergence["step"])
        return None

    @property
    def steps_reached(self) -> int:
        """Steps trained: the summary's steps_done; an unfinished run's, at least: the last
        logged step + 1 or its latest checkpoint's step, whichever is later (v1: the last
        recorded step + 1)."""
        done = (self.summary or {}).get("steps_done")
        if isinstance(done, int):
            return done
        steps = [r[0] for r in self.loss] + [r[0] for r in self.val_loss]
        steps += [r.step for r in self.attention] + [r.step for r in self.spectral]
        if self.last_step is not None:
            steps.append(self.last_step)
        logged = max(steps, default=-1) + 1
        return max(logged, self.checkpoint_step or 0)

    @property
    def reached_is_exact(self) -> bool:
        """False for an unfinished run: it may have trained past its last log or checkpoint."""
        return isinstance((self.summary or {}).get("steps_done"), int)

    def describe_source(self) -> str:
        return f"{self.source.name}#{self.index}"


@dataclass(frozen=True)
class Digest:
    path: Path
    version: int
    cells: tuple[DigestCell, ...]
    suites: Mapping[str, Any] = field(default_factory=dict)
    every: int | None = None


# -- loading --------------------------------------------------------------------------------
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
    if not path.is_file():
        what = "is a folder, not a digest file" if path.is_dir() else "not found"
        raise FlashprobeError(f"digest {what}: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise FlashprobeError(f"digest is not text (UTF-8 JSON): {path}") from None
    except json.JSONDecodeError as exc:
        raise FlashprobeError(f"digest is not JSON: {path} (line {exc.lineno})") from None
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


def _list(values: Sequence[Any] | None) -> list[Any] | None:
    return None if values is None else list(values)
