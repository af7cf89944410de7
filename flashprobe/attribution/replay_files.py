"""The replay files' bookkeeping: their format, the key that skips an unchanged replay, and what
a replay of some variants keeps of the suite's earlier replay (attribution.replay writes them).

A cell's replay.json is keyed by its capture files (name, size, mtime), the variants' specs, the
backend and the flashprobe version. A replay of some variants (`--variant fa2`) merges the
earlier replay's other variants into the new files when both were made on the same captures
with the same backend, and otherwise stops unless --force replaces it (earlier_kept).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe import __version__
from flashprobe.attribution.replay_variants import LayerGroups
from flashprobe.errors import FlashprobeError
from flashprobe.store import reader as sr
from flashprobe.store.replay_results import read_replay

FORMAT = "flashprobe-replay/1"


@dataclass(frozen=True)
class Kept:
    """What a replay keeps of the suite's earlier one: the variants not replayed now (their
    records in the source cells' replay.json and so their summary), their untrained origins."""

    variants: list[str]
    untrained: dict[str, str]
    notes: list[str]


def earlier_kept(
    folder: Path,
    earlier: Mapping[str, Any] | None,
    readable: set[str],
    wanted: Sequence[str],
    backend: str,
    baseline: str,
    plans: Sequence[tuple[sr.CellView, list[tuple[int, Path]], Any]],
    force: bool,
) -> Kept:
    """A replay of some variants (`--variant fa2`) adds them to the earlier replay: its other
    variants are kept when it was made on the same captures with the same backend. Otherwise
    one summary would pool two replays, and replacing it would lose the earlier variants, so
    the user decides: an error says how (replay those too, or --force to replace it)."""
    others = [str(v) for v in (earlier or {}).get("variants") or [] if v not in wanted]
    if earlier is None or not others:
        return Kept([], {}, [])
    why = _mismatch(earlier, readable, backend, baseline, plans)
    path = folder / sr.REPLAY_FILE
    if why is None:
        untrained = earlier.get("untrained_variants")
        untrained = untrained if isinstance(untrained, Mapping) else {}
        note = f"kept the earlier replay of {', '.join(others)} (not replayed now)"
        return Kept(others, {v: str(untrained[v]) for v in others if v in untrained}, [note])
    now = ", ".join(wanted)
    if not force:
        raise FlashprobeError(
            f"{path} holds the replay of {', '.join(others)} {why}: adding {now} would pool two "
            f"replays in one summary; replay those too, or pass --force to replace it with {now}"
        )
    return Kept([], {}, [f"replaced the earlier {path} ({why}) and its {', '.join(others)}"])


def _mismatch(
    earlier: Mapping[str, Any],
    readable: set[str],
    backend: str,
    baseline: str,
    plans: Sequence[tuple[sr.CellView, list[tuple[int, Path]], Any]],
) -> str | None:
    """Why the earlier suite replay cannot take more variants (None: it can)."""
    if earlier.get("format") != FORMAT:
        return f"of format {earlier.get('format')!r}"
    if earlier.get("backend") != backend:
        return f"made with backend {earlier.get('backend')} (now {backend})"
    was = (earlier.get("roles") or {}).get("baseline")
    if was != baseline:
        return f"made on {was}'s captures (now {baseline}'s)"
    sources = [str(s) for s in earlier.get("sources") or []]
    now = [source.name for source, _, _ in plans]
    # a source whose folder is no longer readable is left out of every variant alike
    other = [n for n in now if n not in sources] + [
        n for n in sources if n not in now and n in readable
    ]
    if other:
        return f"made on other source cells than now ({other[0]})"
    for source, steps, _ in plans:
        if steps and not _same_captures(read_replay(source), source, steps, backend):
            return f"made on other captures of {source.name}"
    return None


def _same_captures(
    old: Mapping[str, Any] | None, source: sr.CellView, steps: list[tuple[int, Path]], backend: str
) -> bool:
    """Whether a cell's earlier replay.json replayed the captures it holds now."""
    if old is None or old.get("format") != FORMAT or old.get("backend") != backend:
        return False
    if old.get("source_cell") != source.name or old.get("steps") != step_numbers(steps):
        return False
    if "captures" in old:
        return old["captures"] == capture_fingerprints(steps)
    # written before replay.json named its capture files: not older than any of them
    written = source.replay_path.stat().st_mtime_ns
    return all(written >= path.stat().st_mtime_ns for _, path in steps)


def with_earlier(
    doc: dict[str, Any], old: Mapping[str, Any] | None, kept: Sequence[str]
) -> dict[str, Any]:
    """A cell's new replay.json plus the records and series of the `kept` variants from its
    earlier one (same captures and backend: checked by _mismatch)."""
    if old is None or not kept:
        return doc
    take = set(kept)
    return {
        **doc,
        "records": [*doc["records"], *(r for r in old.get("records", []) if _of(r, take))],
        "series": [*doc["series"], *(s for s in old.get("series", []) if _of(s, take))],
        "layers": sorted({*doc["layers"], *old.get("layers", [])}),
        # the capture notes are the new replay's; a kept variant's own ("fa2: ...") stay
        "notes": sorted({*doc["notes"], *(n for n in old.get("notes", []) if _of(n, take))}),
    }


def _of(item: Any, variants: set[str]) -> bool:
    """Whether a record or series (its "variant") or a note ("<variant>: ...") is one of these."""
    if isinstance(item, str):
        return item.split(":")[0] in variants
    return isinstance(item, Mapping) and item.get("variant") in variants


def capture_fingerprints(steps: Sequence[tuple[int, Any]]) -> list[list[Any]]:
    """(step, name, size, mtime) of each capture file: a rewritten capture differs."""
    files = []
    for step, path in steps:
        st = path.stat()
        files.append([step, path.name, st.st_size, st.st_mtime_ns])
    return files


def replay_key(
    steps: Sequence[tuple[int, Any]], groups: Mapping[str, Mapping[int, LayerGroups]], backend: str
) -> str:
    """A cell's replay key: the same capture files, specs, backend and version replay the same."""
    files = capture_fingerprints(steps)
    specs = {
        v: {
            str(layer): [[list(h), s.to_dict() if s else None] for h, s in g]
            for layer, g in by.items()
        }
        for v, by in groups.items()
    }
    blob = json.dumps(
        {"format": FORMAT, "files": files, "specs": specs, "backend": backend, "v": __version__},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def weight_source(docs: Sequence[Mapping[str, Any]]) -> str | None:
    """The suite replay's weight_gradient: how its cells' replays took dW, each kind once."""
    kinds = sorted({str(d.get("weight_gradient")) for d in docs})
    return " / ".join(kinds) if kinds else None


def step_numbers(steps: Sequence[tuple[int, Any]]) -> list[int]:
    """The steps of (step, capture file) pairs."""
    return [s for s, _ in steps]
