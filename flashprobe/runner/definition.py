"""STORE/<suite>/suite.json: the suite as `flashprobe ablate` ran it.

A run (not --dry-run) writes it first: the YAML after --set (suite edits applied, run-config
overrides folded into base and every variant, so `flashprobe ablate -c STORE/<suite>/suite.json`
plans the same cells); report and replay read the roles from it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.store.result_store import SUITE_FILE, ResultStore, read_json, write_json
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
    """STORE/<suite>/suite.json (atomic): the suite as this run expanded it. A run of the same
    suite that differs only in its seeds (one seed per process, `--set 'seeds=[K]'`, as
    scripts/device/spread.sh runs cells) adds its seeds to the ones already written, so the
    file names every seed the store trained; the read and the write hold a lock."""
    store.check_writable()
    path = store.root / suite.name / SUITE_FILE
    store.check_inside(path)
    if path.parent.exists() and not path.parent.is_dir():
        raise FlashprobeError(f"{path.parent} is not a folder (suite {suite.name} goes there)")
    path.parent.mkdir(parents=True, exist_ok=True)
    definition = suite_definition(suite, overrides)
    with _locked(path.parent):
        definition["seeds"] = _merged_seeds(_previous(path), definition)
        write_json(path, definition)
    return path


def _merged_seeds(previous: Any, definition: Mapping[str, Any]) -> Any:
    """The definition's seeds, plus the previous file's when nothing else differs."""
    seeds = definition.get("seeds", [0])
    if not isinstance(previous, Mapping):
        return seeds
    rest = {k: v for k, v in definition.items() if k != "seeds"}
    before = {k: v for k, v in previous.items() if k != "seeds"}
    old = previous.get("seeds", [0])
    if rest != before or not _int_list(old) or not _int_list(seeds):
        return seeds
    return sorted({*old, *seeds})


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                           for x in value)  # fmt: skip


def _previous(path: Path) -> Any:
    """The suite.json already there, or None (absent or unreadable: it is then replaced)."""
    try:
        return read_json(path)
    except FlashprobeError:
        return None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on the suite's folder while the block runs (flock on the folder
    itself: no lock file is left behind); none where fcntl is missing."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no concurrent shard processes to guard against
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without flock on folders: write unlocked, as before
            pass
        yield
    finally:
        os.close(fd)  # closing releases the lock
