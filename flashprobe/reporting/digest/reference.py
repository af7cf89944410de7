"""Whose runs a suite's variants are tested against (Fisher, the control check).

The reference variant's own runs in the suite when any has an outcome. A suite without them
borrows the reference's runs from another suite of the digests in the same training regime:
issue 23's controls (adamw-controls.yaml) have no paper-code of their own, and a suite branched
from paper-code's step-500 checkpoint (adamw-attribution.yaml) trains paper-code only to the
branch step. The same regime: the configs differ only in the kernel, the capture and the planned
steps (attribution.ranking.component_diff; a run's length is its own outcome). A v1 digest has
no config: its runs are borrowed unchecked, and the report says so. Several matching suites:
none is borrowed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flashprobe.attribution.ranking import component_diff, component_label
from flashprobe.reporting.digest.outcomes import NO_OUTCOME, Branch, seed_outcome
from flashprobe.reporting.digest.schema import DigestCell

#: Config keys (dotted prefixes) that may differ between a suite and its borrowed reference.
REGIME_FREE = ("kernel.", "capture.", "train.steps")


@dataclass(frozen=True)
class ReferenceRuns:
    """Where a suite's reference row comes from: `suite` (the suite itself, or the suite the
    `borrowed` runs come from), with notes on how it was chosen."""

    variant: str
    suite: str
    borrowed: tuple[DigestCell, ...] = ()
    notes: tuple[str, ...] = ()


def reference_runs(
    suite: str,
    cells: Sequence[DigestCell],
    reference: str,
    *,
    horizon: int | None = None,
    branches: Mapping[str, Branch] | None = None,
) -> ReferenceRuns:
    """The reference's runs for `suite` among `cells` (every suite's counted runs)."""
    branches = branches or {}

    def with_outcome(members: Sequence[DigestCell], name: str) -> bool:
        branch = branches.get(name)
        return any(seed_outcome(c, horizon, branch).status != NO_OUTCOME for c in members)

    mine = [c for c in cells if c.suite == suite]
    own = [c for c in mine if c.variant == reference]
    if with_outcome(own, suite):
        return ReferenceRuns(reference, suite)
    others: dict[str, list[DigestCell]] = {}
    for cell in cells:
        if cell.suite != suite and cell.variant == reference:
            others.setdefault(cell.suite, []).append(cell)
    checked, unchecked, notes = [], [], []
    for name, members in others.items():
        if not with_outcome(members, name):
            continue
        differs = _regime_diff(mine, members)
        if differs is None:
            unchecked.append(name)
        elif differs:
            notes.append(f"{reference} of suite {name} not borrowed: its config differs: {differs}")
        else:
            checked.append(name)
    found = checked or unchecked
    lacks = "no run with an outcome" if own else "no runs"
    if len(found) != 1:
        if found:
            notes.append(
                f"{reference} has {lacks} in this suite and runs in several suites of its regime "
                f"({', '.join(found)}): none borrowed (give fewer digests)"
            )
        return ReferenceRuns(reference, suite, (), tuple(notes))
    (name,) = found
    how = (
        "the configs agree but for the kernel, the capture and the planned steps"
        if checked
        else "not checked: a v1 digest has no config"
    )
    notes.append(
        f"{reference} has {lacks} in this suite: the reference is its runs of suite {name} ({how})"
    )
    return ReferenceRuns(reference, name, tuple(others[name]), tuple(notes))


def _regime_diff(mine: Sequence[DigestCell], theirs: Sequence[DigestCell]) -> str | None:
    """'' when the first configs of both agree but for REGIME_FREE keys; their values where they
    differ otherwise (a label); None when either side has no config."""
    a = next((c.config for c in mine if c.config is not None), None)
    b = next((c.config for c in theirs if c.config is not None), None)
    if a is None or b is None:
        return None
    diff = {k: v for k, v in component_diff(b, a).items() if "." in k and not _free(k)}
    return component_label(diff) if diff else ""


def _free(key: str) -> bool:
    return any(key == p.rstrip(".") or key.startswith(p) for p in REGIME_FREE)
