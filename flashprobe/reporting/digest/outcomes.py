"""Training outcomes per variant from digests: which seeds diverged, when, and which have none.

A seed's outcome (after H steps, `--horizon H`, or as far as each run went; steps are 0-based,
so H steps are steps 0 … H − 1, what a run of `train.steps: H` trains):
    diverged        its divergence rule fired (with H: before step H)
    not diverged    it finished without diverging (with H: it trained H steps without
                    diverging in them)
    no outcome      cut before it finished or diverged (with H: it ended before H steps
                    without diverging): it is counted neither way
as in `flashprobe report` (attribution.failure). In a suite branched from a checkpoint
(`branch: {from: SOURCE, step: S}`) a SOURCE run that trained only to step S has no outcome: it
is the others' starting point, not a run through the horizon. A variant's n is its seeds with an
outcome; Fisher's exact test compares its diverged/n with the reference variant's at the same
grid point (attribution.ranking.fisher_exact), the reference's runs in this suite or in the
suite it is borrowed from (digest.reference).

A seed's gradient norm may run away (attribution.runaway) short of the loss rule, or long
before the rule fires (AdamW attribution, `fa2-score-l-bf16` seed 1: from 2,019, the rule at
3,102): `SeedOutcome.runaway` finds it by the seed's last step (a diverged seed's divergence
step; with a horizon, within its steps, as `flashprobe report` looks), the report names it; it
never changes an outcome.

The control check (issue 23): a variant passes when none of its seeds diverged within twice the
reference's median divergence step and every seed ran at least that far. Steps are 0-based, so
the bound B is a step: a divergence at step B is within it, and a seed ran that far when it
trained step B, i.e. more than B steps (a run of exactly B steps stopped one step short).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from flashprobe.attribution.failure import FailureRule
from flashprobe.attribution.loss_rise import held_loss_rise, held_records
from flashprobe.attribution.ranking import fisher_exact
from flashprobe.attribution.runaway import GradientRunaway, gradient_runaway
from flashprobe.reporting.digest.pooling import one_run_per_seed
from flashprobe.reporting.digest.schema import DigestCell

DIVERGED, NOT_DIVERGED, NO_OUTCOME = "diverged", "not diverged", "no outcome"


@dataclass(frozen=True)
class SeedOutcome:
    cell: DigestCell
    status: str
    step: int  # diverged: the divergence step; otherwise the steps the run reached
    why: str = ""  # no outcome: why not
    horizon: int | None = None  # the outcome's horizon (None: as far as the run went)

    @property
    def seed(self) -> int:
        return self.cell.seed

    @property
    def label(self) -> str:
        """What the seed did, in a few words (the outcome table's steps per seed)."""
        flag = f" (gradient runaway from {r.step})" if (r := self.runaway) else ""
        if self.status == DIVERGED:
            return f"diverged at {self.step}{flag}"
        if self.status == NOT_DIVERGED:
            return f"{self.step}, not diverged{flag}"
        return f"no outcome ({self.why}){flag}"

    @cached_property  # read by the label, the JSON and the notes
    def runaway(self) -> GradientRunaway | None:
        """The seed's gradient-norm runaway by its last step (or divergence step), and within
        the horizon's steps, if any."""
        last = self.step if self.horizon is None else min(self.step, self.horizon - 1)
        return gradient_runaway(((s, g) for s, _, g in self.cell.loss), last)

    @cached_property
    def loss_rise(self) -> float | None:
        """How far the loss stood above its running minimum for its loss rule's patience
        (attribution.loss_rise), within the horizon's steps, if any."""
        min_step, in_a_row = held_records(self.cell.config)
        last = None if self.horizon is None else self.horizon - 1
        records = ((s, loss) for s, loss, _ in self.cell.loss)
        return held_loss_rise(records, min_step=min_step, in_a_row=in_a_row, last_step=last)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "status": self.status,
            "step": self.step,
            "steps_reached_exact": self.cell.reached_is_exact,
            "why": self.why or None,
            "gradient_runaway": runaway.to_dict() if (runaway := self.runaway) else None,
            "loss_rise": self.loss_rise,
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


Branch = tuple[str, int]  # (the branch source variant, the branch step)


def is_branch_stub(cell: DigestCell, branch: Branch | None) -> bool:
    """The branch source trained only to the branch step (a suite's own copy of it)."""
    return branch is not None and cell.variant == branch[0] and cell.steps_reached <= branch[1]


def seed_outcome(
    cell: DigestCell, horizon: int | None = None, branch: Branch | None = None
) -> SeedOutcome:
    rule = FailureRule(horizon=horizon)
    step = cell.diverged_step
    failed = rule.step({"diverged": step is not None, "diverged_step": step}, ())
    reached = cell.steps_reached
    if failed is not None:
        return SeedOutcome(cell, DIVERGED, failed, horizon=horizon)
    bound = "" if cell.reached_is_exact else "≥"
    if is_branch_stub(cell, branch):
        assert branch is not None
        why = f"branch source, trained to the branch step {branch[1]} only"
        return SeedOutcome(cell, NO_OUTCOME, reached, why, horizon)
    if horizon is None:
        if cell.finished:
            return SeedOutcome(cell, NOT_DIVERGED, reached, horizon=horizon)
        return SeedOutcome(cell, NO_OUTCOME, reached, f"cut at {bound}{reached}", horizon)
    if reached >= horizon:
        return SeedOutcome(cell, NOT_DIVERGED, reached, horizon=horizon)
    if cell.finished:
        why = f"ended at {reached}, before the horizon {horizon}"
    else:
        why = f"cut at {bound}{reached}, before the horizon {horizon}"
    return SeedOutcome(cell, NO_OUTCOME, reached, why, horizon)


def step_text(step: float | None, thousands: str = "") -> str | None:
    """A step, or the median of steps: whole as an integer (1659), a half step with its .5
    (2178.5), never in three significant digits (2.18e+03); thousands="," groups the digits."""
    if step is None:
        return None
    return f"{step:{thousands}.{0 if float(step).is_integer() else 1}f}"


def branch_points(cells: Sequence[DigestCell]) -> dict[str, Branch]:
    """suite → (source, step), for each suite of `cells` whose runs are branched."""
    suites = {c.suite for c in cells}
    found = {s: branch_point([c for c in cells if c.suite == s]) for s in suites}
    return {s: b for s, b in found.items() if b is not None}


def trained_runs(cells: Sequence[DigestCell]) -> list[DigestCell]:
    """The runs with logged curves, each variant, grid point and seed once (as digest-report
    counts them, pooling.one_run_per_seed), less the branch sources trained only to the
    branch step."""
    counted, _ = one_run_per_seed(cells)
    branches = branch_points(counted)
    return [c for c in counted if c.loss and not is_branch_stub(c, branches.get(c.suite))]


def branch_point(cells: Sequence[DigestCell]) -> Branch | None:
    """(source, step) of the branched cells among `cells` (their cell.json records it)."""
    for cell in cells:
        source, step = cell.meta.get("branch_from"), cell.meta.get("branch_step")
        if source is not None and isinstance(step, int):
            return str(source), step
    return None


def variant_outcomes(
    cells: Sequence[DigestCell],
    horizon: int | None = None,
    reference: str | None = None,
    *,
    reference_suite: str | None = None,
    branches: Mapping[str, Branch] | None = None,
) -> list[VariantOutcome]:
    """Per (suite, variant, grid point), in `cells` order; Fisher p against `reference` at the
    same point, in the same suite or in `reference_suite` (borrowed), where both have seeds with
    an outcome. branches: suite → its branch point (default: read off the cells)."""
    if branches is None:
        branches = branch_points(cells)
    groups: dict[tuple[str, str, str], list[DigestCell]] = {}
    for cell in cells:
        groups.setdefault((cell.suite, cell.variant, cell.point_label), []).append(cell)
    plain = {
        key: VariantOutcome(
            *key,
            tuple(
                seed_outcome(c, horizon, branches.get(key[0]))
                for c in sorted(members, key=lambda c: c.seed)
            ),
        )
        for key, members in groups.items()
    }
    out = []
    for (suite, variant, point), row in plain.items():
        ref = plain.get((reference_suite or suite, reference, point)) if reference else None
        p = None
        if ref is not None and variant != reference and row.n and ref.n:
            p = fisher_exact(len(row.diverged), row.n, len(ref.diverged), ref.n)
        out.append(VariantOutcome(suite, variant, point, row.seeds, p, reference))
    return out


@dataclass(frozen=True)
class ControlCheck:
    """Issue 23's test of a control: no seed diverged within `bound` (twice the reference's
    median divergence step) and every seed ran at least that far. Judged on each run's whole
    length, whatever the horizon."""

    row: VariantOutcome
    reference: VariantOutcome
    bound: float
    early: tuple[SeedOutcome, ...]  # diverged at or before the bound (a 0-based step)
    short: tuple[SeedOutcome, ...]  # stopped before step `bound` without diverging
    clean: tuple[SeedOutcome, ...]  # trained step `bound` without diverging by then

    @property
    def passed(self) -> bool:
        return bool(self.row.seeds) and not self.early and not self.short

    @property
    def verdict(self) -> str:
        return "passes" if self.passed else "does not pass"

    @property
    def why(self) -> str:
        """Exactly why (not): every seed, by what it did."""
        parts = []
        if self.early:
            at = ", ".join(f"seed {s.seed} at {s.cell.diverged_step}" for s in self.early)
            parts.append(f"diverged within {self.bound:g}: {at}")
        if self.short:
            at = ", ".join(f"seed {s.seed} at {_reached(s)}" for s in self.short)
            parts.append(f"stopped short of {self.bound:g} without diverging: {at}")
        if self.clean:
            at = ", ".join(f"seed {s.seed} ({_ran(s)})" for s in self.clean)
            parts.append(f"ran past {self.bound:g} without diverging by then: {at}")
        return "; ".join(parts) or "no seeds"

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.row.variant,
            "suite": self.row.suite,
            "point": self.row.point or None,
            "reference": self.reference.variant,
            "reference_suite": self.reference.suite,
            "reference_median_step": self.reference.median_step,
            "bound": self.bound,
            "passed": self.passed,
            "why": self.why,
            "diverged_within": {str(s.seed): s.cell.diverged_step for s in self.early},
            "stopped_short": {str(s.seed): s.cell.steps_reached for s in self.short},
            "ran_past": {str(s.seed): s.cell.steps_reached for s in self.clean},
        }


def control_check(
    rows: Sequence[VariantOutcome], reference: str, reference_suite: str | None = None
) -> list[ControlCheck]:
    """The control check of every variant but the reference against the reference's row at
    the same point (in its own suite, or in `reference_suite`); none where the reference has
    no diverged seed there."""
    refs = {(r.suite, r.point): r for r in rows if r.variant == reference}
    out = []
    for row in rows:
        ref = refs.get((reference_suite or row.suite, row.point))
        if row.variant == reference or ref is None or ref.median_step is None:
            continue
        bound = 2 * ref.median_step
        early, clean, short = [], [], []
        for s in row.seeds:
            step = s.cell.diverged_step
            if step is not None and step <= bound:
                early.append(s)
            elif step is not None or s.cell.steps_reached > bound:  # trained step `bound`
                clean.append(s)
            else:
                short.append(s)
        out.append(ControlCheck(row, ref, bound, tuple(early), tuple(short), tuple(clean)))
    return out


def _reached(s: SeedOutcome) -> str:
    return f"{'' if s.cell.reached_is_exact else '≥'}{s.cell.steps_reached}"


def _ran(s: SeedOutcome) -> str:
    step = s.cell.diverged_step
    return f"diverged at {step}" if step is not None else f"{_reached(s)} steps"
