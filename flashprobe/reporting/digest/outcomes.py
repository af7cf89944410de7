"""Training outcomes per variant from digests: which seeds diverged, when, and which have none.

A seed's outcome (at a horizon H, `--horizon`, or as far as each run went):
    diverged        its divergence rule fired (by step H)
    not diverged    it finished without diverging (with H: it trained H steps without
                    diverging by step H)
    no outcome      cut before it finished or diverged (with H: it ended before step H
                    without diverging): it is counted neither way
as in `flashprobe report` (attribution.failure). A variant's n is its seeds with an outcome;
Fisher's exact test compares its diverged/n with the reference variant's at the same grid
point (attribution.ranking.fisher_exact).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flashprobe.attribution.failure import FailureRule
from flashprobe.attribution.ranking import fisher_exact
from flashprobe.reporting.digest.schema import DigestCell

DIVERGED, NOT_DIVERGED, NO_OUTCOME = "diverged", "not diverged", "no outcome"


@dataclass(frozen=True)
class SeedOutcome:
    cell: DigestCell
    status: str
    step: int  # diverged: the divergence step; otherwise the steps the run reached
    why: str = ""  # no outcome: why not

    @property
    def seed(self) -> int:
        return self.cell.seed

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "status": self.status,
            "step": self.step,
            "steps_reached_exact": self.cell.reached_is_exact,
            "why": self.why or None,
            "cell": self.cell.name,
            "digest": self.cell.describe_source(),
        }


@dataclass(frozen=True)
class VariantOutcome:
    suite: str
    variant: str
    point: str
    seeds: tuple[SeedOutcome, ...]  # by seed
    fisher_p: float | None = None
    reference: str | None = None

    @property
    def n(self) -> int:
        return sum(s.status != NO_OUTCOME for s in self.seeds)

    @property
    def diverged(self) -> tuple[SeedOutcome, ...]:
        return tuple(s for s in self.seeds if s.status == DIVERGED)

    @property
    def not_diverged(self) -> tuple[SeedOutcome, ...]:
        return tuple(s for s in self.seeds if s.status == NOT_DIVERGED)

    @property
    def no_outcome(self) -> tuple[SeedOutcome, ...]:
        return tuple(s for s in self.seeds if s.status == NO_OUTCOME)

    @property
    def median_step(self) -> float | None:
        """The median divergence step of the diverged seeds."""
        steps = [s.step for s in self.diverged]
        return statistics.median(steps) if steps else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "variant": self.variant,
            "point": self.point or None,
            "seeds": [s.seed for s in self.seeds],
            "n": self.n,
            "diverged": len(self.diverged),
            "divergence_steps": {str(s.seed): s.step for s in self.diverged},
            "median_step": self.median_step,
            "not_diverged_reached": {str(s.seed): s.step for s in self.not_diverged},
            "no_outcome": {str(s.seed): {"reached": s.step, "why": s.why}
                           for s in self.no_outcome},
            "reference": self.reference,
            "fisher_p": self.fisher_p,
            "per_seed": [s.to_dict() for s in self.seeds],
        }  # fmt: skip


def seed_outcome(cell: DigestCell, horizon: int | None = None) -> SeedOutcome:
    rule = FailureRule(horizon=horizon)
    step = cell.diverged_step
    failed = rule.step({"diverged": step is not None, "diverged_step": step}, ())
    reached = cell.steps_reached
    if failed is not None:
        return SeedOutcome(cell, DIVERGED, failed)
    bound = "" if cell.reached_is_exact else "≥"
    if horizon is None:
        if cell.finished:
            return SeedOutcome(cell, NOT_DIVERGED, reached)
        return SeedOutcome(cell, NO_OUTCOME, reached, f"cut at {bound}{reached} steps, unfinished")
    if reached >= horizon:
        return SeedOutcome(cell, NOT_DIVERGED, reached)
    if cell.finished:
        why = f"ended at {reached} steps, before the horizon {horizon}"
    else:
        why = f"cut at {bound}{reached} steps, before the horizon {horizon}"
    return SeedOutcome(cell, NO_OUTCOME, reached, why)


def variant_outcomes(
    cells: Sequence[DigestCell], horizon: int | None = None, reference: str | None = None
) -> list[VariantOutcome]:
    """Per (suite, variant, grid point), in `cells` order; Fisher p against `reference` at the
    same suite and point where both have seeds with an outcome."""
    groups: dict[tuple[str, str, str], list[DigestCell]] = {}
    for cell in cells:
        groups.setdefault((cell.suite, cell.variant, cell.point_label), []).append(cell)
    plain = {
        key: VariantOutcome(
            *key, tuple(seed_outcome(c, horizon) for c in sorted(members, key=lambda c: c.seed))
        )
        for key, members in groups.items()
    }
    out = []
    for (suite, variant, point), row in plain.items():
        ref = plain.get((suite, reference, point)) if reference else None
        p = None
        if ref is not None and variant != reference and row.n and ref.n:
            p = fisher_exact(len(row.diverged), row.n, len(ref.diverged), ref.n)
        out.append(VariantOutcome(suite, variant, point, row.seeds, p, reference))
    return out


def control_check(rows: Sequence[VariantOutcome], reference: str) -> list[str]:
    """Issue 23's test of a control: does it train to twice the reference's median divergence
    step without diverging? One line per other variant (same suite and point). Judged on each
    run's whole length, whatever the horizon."""
    lines = []
    refs = {(r.suite, r.point): r for r in rows if r.variant == reference}
    for row in rows:
        ref = refs.get((row.suite, row.point))
        if row.variant == reference or ref is None or ref.median_step is None:
            continue
        bound = 2 * ref.median_step
        early, clean, short = [], [], []
        for s in row.seeds:
            step = s.cell.diverged_step
            if step is not None and step <= bound:
                early.append(f"seed {s.seed} at {step}")
            elif step is not None or s.cell.steps_reached >= bound:
                clean.append(s)
            else:
                exact = "" if s.cell.reached_is_exact else "≥"
                short.append(f"seed {s.seed} at {exact}{s.cell.steps_reached}")
        parts = [f"{len(clean)} of {len(row.seeds)} seeds trained past it without diverging"]
        if early:
            parts.append(f"{len(early)} diverged before it ({', '.join(early)})")
        if short:
            parts.append(
                f"{len(short)} stopped short of it without diverging ({', '.join(short)}): "
                "no verdict for them"
            )
        lines.append(
            f"{row.variant}: twice {reference}'s median divergence step is {bound:g}; "
            + "; ".join(parts)
        )
    return lines
