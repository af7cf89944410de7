"""`flashprobe digest-report`: the results of several digests, one report per suite.

Per suite: the outcomes per variant (digest.outcomes) with Fisher's exact test against a
reference variant (its runs in the suite, or borrowed from another suite of the same regime:
digest.reference), the control check of issue 23 (twice the reference's median divergence
step), the component ranking of a restore / add suite (digest.ranking: attribution.ranking on
the digests' outcomes), the spectral norm rise per run (digest.rise), the per-layer spectral
norms of the chosen runs, the attention summary per run (digest.attention), the δ replay of the
replayed runs (digest.replay), the superseded runs (digest.pooling) and notes on what the counts
leave out (a branched suite's branch point among them) or mix (runs trained on different token
streams: reporting.training_data). digest.tables renders the reports as markdown, text and JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashprobe.attribution.runaway import runaway_note
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest import attention as att
from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.outcomes import (
    DIVERGED,
    Branch,
    ControlCheck,
    VariantOutcome,
    branch_points,
    control_check,
    is_branch_stub,
    trained_runs,
    variant_outcomes,
)
from flashprobe.reporting.digest.pooling import Superseded, one_run_per_seed
from flashprobe.reporting.digest.ranking import DigestRanking, digest_ranking
from flashprobe.reporting.digest.reference import reference_runs
from flashprobe.reporting.digest.rise import RiseResult, RiseRule, rises, trajectories
from flashprobe.reporting.digest.schema import Digest, DigestCell
from flashprobe.reporting.training_data import mixed_data_note


@dataclass
class DigestSuiteReport:
    suite: str
    reference: str | None
    horizon: int | None
    rule: RiseRule
    outcomes: list[VariantOutcome]
    rises: list[RiseResult]
    attention: list[att.AttentionSummary]
    chosen: list[DigestCell]
    superseded: list[Superseded]
    notes: list[str]
    cells: list[DigestCell] = field(repr=False)
    controls: list[ControlCheck] = field(default_factory=list)
    reference_suite: str | None = None  # where the reference row comes from (None: none)
    branch: Branch | None = None
    ranking: DigestRanking | None = None  # restore / add designs (digest.ranking)
    #: the reference's runs borrowed from another suite, on this suite's seeds (the figures
    #: draw them in place of a branch source trained only to its branch step)
    borrowed: list[DigestCell] = field(default_factory=list, repr=False)

    @property
    def replayed(self) -> list[DigestCell]:
        """The counted runs whose digest holds their δ replay."""
        return [c for c in self.cells if c.replay is not None]

    @property
    def has_points(self) -> bool:
        return any(c.point for c in self.cells)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "reference": self.reference,
            "horizon": self.horizon,
            "rise_rule": self.rule.describe(),
            "reference_suite": self.reference_suite,
            "branch": None if self.branch is None else {"from": self.branch[0],
                                                        "step": self.branch[1]},
            "outcomes": [o.to_dict() for o in self.outcomes],
            "control_check": [c.to_dict() for c in self.controls],
            "ranking": None if self.ranking is None else self.ranking.to_dict(),
            "replay": [
                {"variant": c.variant, "seed": c.seed, "point": c.point_label or None,
                 "diverged_step": c.diverged_step, **c.replay.to_dict()}
                for c in self.replayed if c.replay is not None
            ],
            "spectral_rise": [r.to_dict() for r in self.rises],
            "attention": [a.to_dict() for a in self.attention],
            "trajectories": [
                {"variant": c.variant, "seed": c.seed, "point": c.point_label or None,
                 **{m: t.to_dict() for m, t in trajectories(c, self.horizon).items()},
                 "attention": _attention_series(c, self.horizon)}
                for c in self.cells
            ],
            "chosen": [c.label for c in self.chosen],
            "superseded": [s.describe() for s in self.superseded],
            "notes": self.notes,
        }  # fmt: skip


def _attention_series(cell: DigestCell, horizon: int | None) -> dict[str, Any]:
    """Per quantity, layer → [[step, value]] (tie and P̄ = 1 counts summed over heads)."""
    records = att.records_until(cell, horizon)
    return {
        name: {str(layer): [list(p) for p in pts] for layer, pts in series.items()}
        for name in att.FIELDS
        if (series := att.layer_series(records, name))
    }


def load_digests(paths: Sequence[str | Path]) -> list[Digest]:
    if not paths:
        raise FlashprobeError("no digest files given")
    return [load_digest(path, order) for order, path in enumerate(paths)]


def trained_cells(paths: Sequence[str | Path]) -> list[DigestCell]:
    """The digests' runs with logged curves, as digest-report counts them (`trained_runs`); a
    one-line FlashprobeError where the digests hold no cells or no such run (the scripts that
    read digests: scripts/run_stats.py, scripts/runaway_table.py)."""
    cells = [cell for digest in load_digests(paths) for cell in digest.cells]
    names = ", ".join(map(str, paths))
    where = f"{names} holds" if len(paths) == 1 else f"the digests {names} hold"
    if not cells:
        raise FlashprobeError(f"{where} no cells")
    kept = trained_runs(cells)
    if not kept:
        raise FlashprobeError(f"{where} no run with logged curves")
    return kept


def build_digest_reports(
    digests: Sequence[Digest],
    *,
    suite: str | None = None,
    horizon: int | None = None,
    reference: str | None = None,
    rule: RiseRule | None = None,
    chosen: Sequence[str] = (),
    safe: str | None = None,
) -> list[DigestSuiteReport]:
    """One report per suite (or only `suite`). `chosen`: runs as VARIANT:SEED for the
    per-layer tables and figures (default: the reference's first diverged seed); `safe`: the
    ranking's add-design reference (default: inferred, digest.ranking)."""
    if horizon is not None and horizon < 1:
        raise FlashprobeError(f"--horizon must be a step count >= 1, got {horizon}")
    rule = rule or RiseRule()
    every = [c for d in digests for c in d.cells]
    if not every:
        raise FlashprobeError("the digests hold no cells")
    suites = list(dict.fromkeys(c.suite for c in every))
    if suite is not None and suite not in suites:
        raise FlashprobeError(f"no suite {suite!r} in the digests; suites: {', '.join(suites)}")
    names = [suite] if suite is not None else suites
    if reference is not None and not any(c.variant == reference for c in every):
        variants = sorted({c.variant for c in every})
        raise FlashprobeError(
            f"no variant {reference!r} in the digests; variants: {', '.join(variants)}"
        )
    if safe is not None and not any(c.variant == safe for c in every):
        raise FlashprobeError(f"no variant {safe!r} (--safe) in the digests")
    declared = _declared_references(digests)
    if chosen:
        choose_cells(every, chosen, reference)  # a run named in no suite: a one-line error
    counted, _ = one_run_per_seed(every)
    branches = _branches(digests, counted)
    return [
        _suite_report(
            name,
            [c for c in every if c.suite == name],
            digests,
            horizon,
            reference or declared.get(name),
            reference is None,
            rule,
            chosen,
            counted,
            branches,
            declared.get(name),
            safe,
        )
        for name in names
    ]


def _suite_report(
    name: str,
    every: list[DigestCell],
    digests: Sequence[Digest],
    horizon: int | None,
    reference: str | None,
    inferred: bool,
    rule: RiseRule,
    chosen: Sequence[str],
    counted: Sequence[DigestCell],
    branches: Mapping[str, Branch],
    baseline: str | None = None,
    safe: str | None = None,
) -> DigestSuiteReport:
    cells, superseded = one_run_per_seed(every)
    notes = [_sources(digests, name)]
    branch = branches.get(name)
    if branch is not None:
        notes.append(_branch_note(branch, cells))
    borrowed: tuple[DigestCell, ...] = ()
    reference_suite = None
    if reference is not None:
        found = reference_runs(name, counted, reference, horizon=horizon, branches=branches)
        notes += found.notes
        borrowed = found.borrowed
        if borrowed or any(c.variant == reference for c in cells):
            reference_suite = found.suite
    if reference is not None and reference_suite is None:
        notes.append(f"no reference variant {reference!r} in this suite: no Fisher tests")
        reference = None
    elif reference is not None and inferred:
        notes.append(f"reference: {reference} (the suite's declared baseline; --reference)")
    if reference is None:
        notes.append("no reference variant: --reference VARIANT adds Fisher tests and controls")
    cells = sorted(cells, key=lambda c: (c.variant != reference, c.variant, c.point_label, c.seed))
    outcomes = variant_outcomes(
        [*borrowed, *cells], horizon, reference, reference_suite=reference_suite,
        branches=branches,
    )  # fmt: skip
    controls: list[ControlCheck] = []
    if reference is not None:
        controls = control_check(outcomes, reference, reference_suite)
        if not controls and any(o.variant != reference for o in outcomes):
            notes.append(
                f"no control check: {reference} has no diverged seed (no median divergence step)"
            )
    ranking = None
    if baseline or reference:
        ranking, why = digest_ranking(
            name, counted, str(baseline or reference), safe=safe,
            declared=_suite_json(digests, name), horizon=horizon, branches=branches,
        )  # fmt: skip
        notes += why + (ranking.notes if ranking is not None else [])
    notes += _run_notes(cells, superseded, horizon)
    notes += mixed_data_note([*borrowed, *cells])  # the runs the outcomes compare
    notes += _runaway_notes(outcomes)
    notes += _replay_notes(digests, name, cells, superseded)
    # A branch source trained only to the branch step has no record past it to rise from.
    results = rises([c for c in cells if not is_branch_stub(c, branch)], rule, horizon)
    resolutions = sorted({r.trajectory.resolution for r in results if r.trajectory.resolution})
    if resolutions:
        every_steps = ", ".join(map(str, resolutions))
        notes.append(
            f"spectral norms are recorded every {every_steps} steps: a rise step is the first "
            "record past the threshold (the rise happened within that many steps before it)"
        )
    summaries = [s for c in cells if (s := att.summarise(c, horizon)) is not None]
    return DigestSuiteReport(
        suite=name,
        reference=reference,
        horizon=horizon,
        rule=rule,
        outcomes=outcomes,
        rises=results,
        attention=summaries,
        chosen=choose_cells(cells, chosen, reference, strict=False),
        superseded=superseded,
        notes=notes,
        cells=cells,
        controls=controls,
        reference_suite=reference_suite,
        branch=branch,
        ranking=ranking,
        borrowed=[c for c in borrowed if c.seed in {x.seed for x in cells}],
    )


def _branches(digests: Sequence[Digest], cells: Sequence[DigestCell]) -> dict[str, Branch]:
    """suite → (source, step): from its branched runs' cell.json, else its suite.json."""
    out: dict[str, Branch] = {}
    for digest in digests:
        for name, raw in digest.suites.items():
            branch = raw.get("branch") if isinstance(raw, Mapping) else None
            if isinstance(branch, Mapping) and isinstance(branch.get("step"), int):
                if branch.get("from") is not None:
                    out[str(name)] = (str(branch["from"]), int(branch["step"]))
    out.update(branch_points(cells))
    return out


def _branch_note(branch: Branch, cells: Sequence[DigestCell]) -> str:
    source, step = branch
    text = (
        f"branch point: every variant but {source} starts from {source}'s checkpoint at step "
        f"{step} of its seed (steps 0–{step - 1} are {source}'s, in the same data order); steps "
        f"count from the start of {source}'s run"
    )
    cut = [c for c in cells if c.variant == source and c.steps_reached <= step]
    if cut and not any(c.diverged_step is not None for c in cut):
        seeds = ",".join(str(c.seed) for c in sorted(cut, key=lambda c: c.seed))
        text += f"; {source} trained only to step {step} here (seeds {seeds}): no outcome"
    return text


def _replay_notes(
    digests: Sequence[Digest],
    suite: str,
    cells: Sequence[DigestCell],
    superseded: Sequence[Superseded],
) -> list[str]:
    out = []
    old = [d.path.name for d in digests if d.version < 3 and any(c.suite == suite for c in d.cells)]
    if old:
        out.append(f"digests of format v1/v2 ({', '.join(old)}) carry no δ replay results")
    for cell in cells:
        if cell.replay is not None and cell.replay.error is not None:
            out.append(f"{cell.label}: its replay.json was not read: {cell.replay.error}")
    hidden = [s.cell.label for s in superseded if s.cell.replay is not None]
    if hidden:
        out.append(f"superseded runs with a δ replay, not shown: {', '.join(hidden)}")
    return out


def choose_cells(
    cells: Sequence[DigestCell],
    wanted: Sequence[str],
    reference: str | None,
    *,
    strict: bool = True,
) -> list[DigestCell]:
    """The runs named VARIANT:SEED (a one-line error for one that is not there; with
    strict=False, one suite of several: skipped), else the reference's first diverged seed,
    else its first seed, else the first run."""
    out = []
    for text in wanted:
        variant, _, seed = text.rpartition(":")
        if not variant or not seed.lstrip("-").isdigit():
            raise FlashprobeError(f"--cell must be VARIANT:SEED, got {text!r}")
        found = [c for c in cells if c.variant == variant and c.seed == int(seed)]
        if not found and strict:
            runs = ", ".join(f"{c.variant}:{c.seed}" for c in cells)
            raise FlashprobeError(f"no run {text!r} in the digests; runs: {runs}")
        out += [c for c in found if c not in out]
    if out or wanted or not cells:
        return out
    mine = [c for c in cells if c.variant == reference]
    diverged = [c for c in mine if c.diverged_step is not None]
    return [(diverged or mine or list(cells))[0]]


def _declared_references(digests: Sequence[Digest]) -> dict[str, str]:
    """suite → the baseline its suite.json declares (replay.baseline, else branch.from)."""
    out: dict[str, str] = {}
    for digest in digests:
        for name, raw in digest.suites.items():
            if not isinstance(raw, Mapping):
                continue
            replay = raw.get("replay") if isinstance(raw.get("replay"), Mapping) else {}
            branch = raw.get("branch") if isinstance(raw.get("branch"), Mapping) else {}
            value = replay.get("baseline") or branch.get("from")
            if value:
                out[str(name)] = str(value)
    return out


def _suite_json(digests: Sequence[Digest], suite: str) -> Mapping[str, Any]:
    """The suite as ablate ran it (suite.json), from the latest digest that has it."""
    for digest in reversed(digests):
        raw = digest.suites.get(suite)
        if isinstance(raw, Mapping):
            return raw
    return {}


def _sources(digests: Sequence[Digest], suite: str) -> str:
    parts = []
    for d in digests:
        n = sum(c.suite == suite for c in d.cells)
        if n:
            parts.append(f"{d.path.name} (format v{d.version}, {n} runs)")
    return "digests: " + ", ".join(parts)


def _run_notes(
    cells: Sequence[DigestCell], superseded: Sequence[Superseded], horizon: int | None
) -> list[str]:
    out = []
    if superseded:
        out.append(
            f"{len(superseded)} superseded run(s) not counted (each variant, grid point and seed "
            "counts once: a run with an outcome before a cut one, then its longest, then latest; "
            "listed below)"
        )
    old = [c for c in cells if c.version < 2]
    if old:
        out.append(
            f"{len(old)} run(s) from v1 digests: no config (a run's length is the steps it "
            "reached) and no last logged step (a cut run reached at least its last record + 1)"
        )
    empty = [c.label for c in cells if not c.loss]
    if empty:
        shown = ", ".join(empty[:4]) + (" ..." if len(empty) > 4 else "")
        out.append(f"{len(empty)} run(s) have no loss curve in their digest: {shown}")
    planned = {c.planned_steps for c in cells if c.planned_steps is not None}
    if horizon is None and len(planned) > 1:
        out.append(
            f"runs of different planned lengths ({', '.join(map(str, sorted(planned)))} steps): "
            "a longer run has more time to diverge; --horizon N counts every run after N steps"
        )
    return out


def _runaway_notes(outcomes: Sequence[VariantOutcome]) -> list[str]:
    """Seeds the loss rule did not count as diverged whose gradient norm ran away."""
    return runaway_note((o.variant, s.seed, runaway)
                        for o in outcomes for s in o.seeds
                        if s.status != DIVERGED and (runaway := s.runaway))  # fmt: skip
