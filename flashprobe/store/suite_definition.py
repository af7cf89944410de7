"""STORE/<suite>/suite.json read back (written by runner.definition): the suite as `flashprobe
ablate` last ran it, its failure: section and the roles replay and report take from it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.store.result_store import SUITE_FILE, read_json


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
