"""Which token stream each run trained on, and the report note for a suite whose runs trained
on more than one (a device machine whose site-packages changed builds another pysource corpus).

A finished run's summary records it as environment.data_digest (runner.training): the token
stream's sha256 (TokenDataset.digest; the stdlib corpus's is a prefix); a cut run's comes from
its run record (store.reader.read_data_digest; in a digest, the cell's environment). Stores and
digests written before it was recorded and token-folder runs have none: unknown, never counted
as a difference.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

SHOWN_HEX = 12  # digest characters a note shows: enough to tell corpora apart


class TrainedRun(Protocol):
    """A run as both reports hold it (store.reader.CellView, digest.schema.DigestCell)."""

    @property
    def variant(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def point_label(self) -> str: ...

    @property
    def data_digest(self) -> str | None: ...


def mixed_data_note(runs: Iterable[TrainedRun]) -> list[str]:
    """One note naming the runs per data digest when the runs recorded more than one; else
    none. Runs that record no digest are left out (unknown is not a difference)."""
    by_digest: dict[str, dict[str, list[int]]] = {}
    for run in runs:
        digest = run.data_digest
        if digest is not None:
            label = f"{run.variant} [{run.point_label}]" if run.point_label else run.variant
            by_digest.setdefault(digest, {}).setdefault(label, []).append(run.seed)
    if len(by_digest) < 2:
        return []
    groups = "; ".join(
        f"{digest[:SHOWN_HEX]}: " + ", ".join(_seeds(label, seeds) for label, seeds in mine.items())
        for digest, mine in by_digest.items()
    )
    return [
        f"the runs trained on {len(by_digest)} different token streams (data digests; their "
        f"outcomes may not compare): {groups}"
    ]


def _seeds(label: str, seeds: list[int]) -> str:
    ordered = sorted(set(seeds))
    word = "seed" if len(ordered) == 1 else "seeds"
    return f"{label} {word} {','.join(map(str, ordered))}"
