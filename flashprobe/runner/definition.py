"""STORE/<suite>/suite.json: the suite as `flashprobe ablate` ran it.

A run (not --dry-run) writes it first: the YAML after --set (suite edits applied, run-config
overrides folded into base and every variant, so `flashprobe ablate -c STORE/<suite>/suite.json`
plans the same cells); report and replay read the roles from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.store.result_store import SUITE_FILE, ResultStore, write_json
from flashprobe.suites.suite import Suite, apply_overrides, set_dotted


def suite_definition(suite: Suite, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """The raw suite after --set, named: suite edits are already in suite.raw; run-config
    overrides (applied to every cell after its variant) are set in base and in every variant,
    which expands to the same cells."""
    raw, run = apply_overrides(suite.raw, overrides)
    raw = {"name": suite.name, **raw}  # the name may have come from the YAML file's stem
    if not run:
        return raw
    variants = raw.get("variants")
    if not isinstance(variants, Mapping) or not variants:
        variants = {"baseline": {}}
    base = dict(raw.get("base") or {})
    deltas = {str(k): dict(v) if isinstance(v, Mapping) else {} for k, v in variants.items()}
    for key, value in run.items():
        set_dotted(base, key, value)
        for delta in deltas.values():
            set_dotted(delta, key, value)
    return {**raw, "base": base, "variants": deltas}


def write_suite_definition(store: ResultStore, suite: Suite, overrides: Iterable[str] = ()) -> Path:
    """STORE/<suite>/suite.json (atomic): the suite as this run expanded it."""
    store.check_writable()
    path = store.root / suite.name / SUITE_FILE
    store.check_inside(path)
    if path.parent.exists() and not path.parent.is_dir():
        raise FlashprobeError(f"{path.parent} is not a folder (suite {suite.name} goes there)")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, suite_definition(suite, overrides))
    return path
