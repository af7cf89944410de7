"""The replay files' bookkeeping: their format, the key that skips an unchanged replay, and what
a replay of some variants keeps of the suite's earlier replay (attribution.replay writes them).

A cell's replay.json is keyed by its capture files (step, name, size, sha256: the manifest's,
store.capture_reader.capture_sha256), the variants' specs, the backend and the flashprobe
version, so a store copied without its file times (tar, `cp -r`, another machine) still matches
while a rewritten capture does not. A replay of some variants (`--variant fa2`) merges the
earlier replay's other variants into the new files when both were made on the same captures
with the same backend, and otherwise stops unless --force replaces it (earlier_kept).

Replays written before the sha256 (their captures: step, name, size, mtime in ns) still match
captures unchanged in place. Where the file times changed (a copied store) their captures
cannot be checked: the cell is replayed again instead of read from the cache, and a replay of
some variants replays the earlier replay's other variants too (Kept.redo) rather than refusing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashprobe import __version__
from flashprobe.attribution.replay_variants import LayerGroups
from flashprobe.errors import FlashprobeError
from flashprobe.store import reader as sr
from flashprobe.store.capture_reader import capture_sha256
from flashprobe.store.replay_results import read_replay

FORMAT = "flashprobe-replay/1"


@dataclass(frozen=True)
class Kept:
    """What a replay keeps of the suite's earlier one: the variants not replayed now (their
    records in the source cells' replay.json and so their summary), their untrained origins.
    `redo`: the earlier variants to replay again with those asked for, as its captures cannot
    be checked (written before the sha256, file times changed); `refusal`: the error when they
    cannot be (not in the suite any more)."""

    variants: list[str]
    untrained: dict[str, str]
    notes: list[str]
    redo: list[str] = field(default_factory=list)
    refusal: str = ""


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
    why, unknown = _mismatch(earlier, readable, backend, baseline, plans)
    path = folder / sr.REPLAY_FILE
    untrained = earlier.get("untrained_variants")
    untrained = untrained if isinstance(untrained, Mapping) else {}
    if why is None:
        note = f"kept the earlier replay of {', '.join(others)} (not replayed now)"
        return Kept(others, {v: str(untrained[v]) for v in others if v in untrained}, [note])
    now = ", ".join(wanted)
    refusal = (
        f"{path} holds the replay of {', '.join(others)} {why}: adding {now} would pool two "
        f"replays in one summary; replay those too, or pass --force to replace it with {now}"
    )
    if force:
        return Kept([], {}, [f"replaced the earlier {path} ({why}) and its {', '.join(others)}"])
    if unknown:
        note = f"replayed {', '.join(others)} again too: the earlier {path} was {why}"
        return Kept([], {}, [note], redo=others, refusal=refusal)
    raise FlashprobeError(refusal)


def _mismatch(
    earlier: Mapping[str, Any],
    readable: set[str],
    backend: str,
    baseline: str,
    plans: Sequence[tuple[sr.CellView, list[tuple[int, Path]], Any]],
) -> tuple[str | None, bool]:
    """Why the earlier suite replay cannot take more variants (None: it can), and whether only
    because the captures of a replay written before the sha256 cannot be checked."""
    if earlier.get("format") != FORMAT:
        return f"of format {earlier.get('format')!r}", False
    if earlier.get("backend") != backend:
        return f"made with backend {earlier.get('backend')} (now {backend})", False
    was = (earlier.get("roles") or {}).get("baseline")
    if was != baseline:
        return f"made on {was}'s captures (now {baseline}'s)", False
    sources = [str(s) for s in earlier.get("sources") or []]
    now = [source.name for source, _, _ in plans]
    # a source whose folder is no longer readable is left out of every variant alike
    other = [n for n in now if n not in sources] + [
        n for n in sources if n not in now and n in readable
    ]
    if other:
        return f"made on other source cells than now ({other[0]})", False
    unchecked = None
    for source, steps, _ in plans:
        if not steps:
            continue
        same = same_captures(read_replay(source), source, steps, backend)
        if same is False:
            return f"made on other captures of {source.name}", False
        if same is None and unchecked is None:
            unchecked = source.name
    if unchecked is not None:
        return (
            f"made on captures of {unchecked} it cannot check: it predates their sha256 and "
            "their file times changed since (a copied store)"
        ), True
    return None, False


def same_captures(
    old: Mapping[str, Any] | None, source: sr.CellView, steps: list[tuple[int, Path]], backend: str
) -> bool | None:
    """Whether a cell's earlier replay.json replayed the captures it holds now; None: it cannot
    tell (a replay.json written before the sha256, whose captures' file times changed)."""
    if old is None or old.get("format") != FORMAT or old.get("backend") != backend:
        return False
    if old.get("source_cell") != source.name or old.get("steps") != step_numbers(steps):
        return False
    recorded = old.get("captures")
    if recorded is not None and not _by_time(recorded):
        return recorded == capture_fingerprints(steps)
    if recorded is not None:  # (step, name, size, mtime): a copy changes only the time
        now = _time_fingerprints(steps)
        if recorded == now:
            return True
        shape = [f[:3] for f in recorded if isinstance(f, list)]
        return None if shape == [f[:3] for f in now] else False
    # written before replay.json named its capture files: not older than any of them
    written = source.replay_path.stat().st_mtime_ns
    return True if all(written >= path.stat().st_mtime_ns for _, path in steps) else None


def _by_time(recorded: Sequence[Any]) -> bool:
    """Whether replay.json's captures are the older (step, name, size, mtime_ns) fingerprints."""
    return any(isinstance(f, list) and len(f) == 4 and _json_int(f[3]) for f in recorded)


def _json_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def cached(
    old: Mapping[str, Any] | None,
    steps: Sequence[tuple[int, Any]],
    groups: Mapping[str, Mapping[int, LayerGroups]],
    backend: str,
    key: str,
) -> bool:
    """Whether a cell's replay.json is the replay `key` stands for; one written before the
    sha256 (captures by file time) is, when its captures are unchanged in place."""
    if old is None:
        return False
    if old.get("key") == key:
        return True
    recorded = old.get("captures")
    if recorded is None or _by_time(recorded):
        return old.get("key") == replay_key(steps, groups, backend, _time_fingerprints(steps))
    return False


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
    """(step, name, size, sha256) of each capture file: a rewritten capture differs, a copy
    (whatever its file times) does not."""
    digests = capture_sha256(steps)
    return [
        [step, path.name, path.stat().st_size, digest]
        for (step, path), digest in zip(steps, digests, strict=True)
    ]


def _time_fingerprints(steps: Sequence[tuple[int, Any]]) -> list[list[Any]]:
    """(step, name, size, mtime_ns): the fingerprints of replays written before the sha256."""
    files = []
    for step, path in steps:
        st = path.stat()
        files.append([step, path.name, st.st_size, st.st_mtime_ns])
    return files


def replay_key(
    steps: Sequence[tuple[int, Any]],
    groups: Mapping[str, Mapping[int, LayerGroups]],
    backend: str,
    files: list[list[Any]] | None = None,
) -> str:
    """A cell's replay key: the same capture files, specs, backend and version replay the same.
    `files`: the captures' fingerprints (default: capture_fingerprints)."""
    files = capture_fingerprints(steps) if files is None else files
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
