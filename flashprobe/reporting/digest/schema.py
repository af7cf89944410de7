"""The digest format (every version) and what a digest is read into: Digest, DigestCell.

Version 3 (written by digest.writer), strict JSON (a non-finite number is null):

    {"format": "flashprobe-digest", "version": 3,
     "written_by": {"flashprobe": "0.1.0", "code_version": "..."},
     "store": "/tmp/adamw", "every": 10,
     "suites": {"quick": {...suite.json: the suite as ablate ran it...}},
     "cells": [
       {"meta": {...cell.json...}, "config": {...config.json...},
        "environment": {...environment.json...}, "started": 1733100000.0,
        "summary": {...summary.json...} | null (unfinished),  # its environment.data_digest:
                                                # the token stream's sha256 (absent: unknown)
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

digest.loader reads every version into DigestCells; anything else is a one-line
FlashprobeError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashprobe.reporting.digest.replay import ReplayDigest
from flashprobe.store.reader import data_digest_of, recorded_digest
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
    def data_digest(self) -> str | None:
        """The token stream's digest: the summary's, else the cell environment's (written from
        the run record, so a cut run has it too); None when neither records one."""
        return data_digest_of(self.summary) or recorded_digest(self.environment)

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


def _list(values: Sequence[Any] | None) -> list[Any] | None:
    return None if values is None else list(values)
