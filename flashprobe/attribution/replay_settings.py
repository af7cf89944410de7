"""The `replay:` section of a suite (and the flags of `flashprobe replay`): which variants to
replay on whose captures, the roles the ranking uses, and the backend.

Suite YAML (optional section; every key optional):

    replay:
      baseline: fa2            # the failing baseline (default: branch.from, then a variant
                               # named baseline, then the fa2 spec)
      safe: all-safe           # the all-safe variant of a one-factor-in design (default: a
                               # variant named safe / all-safe / fp32, or the fp32 spec)
      components: {sfa: stabilized softmax}   # labels instead of the spec diff
      variants: [fa2, sfa]     # which variants to replay (default: all trained; a name
                               # declared in suite.json but not trained is replayed too)
      sources: baseline        # whose captures to replay on: baseline (default) or all
      backend: auto            # auto | emulator | triton
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashprobe.backends import BACKENDS
from flashprobe.errors import FlashprobeError
from flashprobe.store.replay_results import read_suite_replay
from flashprobe.store.suite_definition import read_suite_definition

REPLAY_KEYS = ("baseline", "safe", "components", "variants", "sources", "backend")
SOURCES = ("baseline", "all")


@dataclass(frozen=True)
class ReplaySettings:
    baseline: str | None = None
    safe: str | None = None
    components: Mapping[str, str] = field(default_factory=dict)
    variants: tuple[str, ...] | None = None
    sources: str = "baseline"
    backend: str = "auto"

    @classmethod
    def from_suite(cls, raw: Any, **overrides: Any) -> ReplaySettings:
        """The suite's `replay:` section (None/True: defaults), then non-None overrides."""
        data = {} if raw in (None, True) else raw
        if not isinstance(data, Mapping):
            raise FlashprobeError("replay: must be a mapping (or true)")
        unknown = sorted(set(data) - set(REPLAY_KEYS))
        if unknown:
            raise FlashprobeError(
                f"unknown replay key {unknown[0]!r}; known: {', '.join(REPLAY_KEYS)}"
            )
        merged = {**data, **{k: v for k, v in overrides.items() if v not in (None, (), [])}}
        components = merged.get("components") or {}
        if not isinstance(components, Mapping):
            raise FlashprobeError("replay.components must map variant → label")
        variants = merged.get("variants")
        if variants is not None and (
            isinstance(variants, str) or not isinstance(variants, Sequence)
        ):
            raise FlashprobeError("replay.variants must be a list of variant names")
        settings = cls(
            baseline=_opt_str(merged.get("baseline")),
            safe=_opt_str(merged.get("safe")),
            components={str(k): str(v) for k, v in components.items()},
            variants=tuple(str(v) for v in variants) if variants is not None else None,
            sources=str(merged.get("sources", "baseline")),
            backend=str(merged.get("backend", "auto")),
        )
        if settings.sources not in SOURCES:
            raise FlashprobeError(f"replay.sources must be one of {', '.join(SOURCES)}")
        if settings.backend not in BACKENDS:
            raise FlashprobeError(f"replay backend must be one of {', '.join(BACKENDS)}")
        return settings


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def stored_settings(folder: Path, **flags: Any) -> ReplaySettings:
    """The replay settings of a suite in the store: `flags` (ReplaySettings fields; None: not
    given), then the suite's own `replay:` section (suite.json), then the roles its last replay
    resolved (which may have been inferred)."""
    declared = (read_suite_definition(folder) or {}).get("replay")
    declared = dict(declared) if isinstance(declared, dict) else {}
    roles = (read_suite_replay(folder) or {}).get("roles") or {}
    for key in ("baseline", "safe", "components"):
        if not declared.get(key) and roles.get(key):
            declared[key] = roles[key]
    return ReplaySettings.from_suite(declared, **flags)
