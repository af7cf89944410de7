"""The component ranking of a suite from digests: attribution.ranking on the digests' outcomes.

The same table as `flashprobe report`'s (design, component, Δp, Fisher p, Wilson interval,
steps to failure, mechanism share, score: attribution.ranking.rank computes every number);
only its inputs come from digests:

    outcomes    each seed's outcome as digest-report counts it (digest.outcomes: the horizon,
                the branch source trained only to its branch step has none)
    baseline    the suite's declared baseline (replay.baseline, else branch.from), else the
                report's reference. Its runs in the suite, or borrowed from another suite of the
                same regime (digest.reference): adamw-attribution trains paper-code only to its
                branch step, so its outcome comes from quick's paper-code. Borrowed runs count
                on the seeds the suite trained only (the same data order as the branched runs).
    safe        the add design's reference: --safe, else the suite's replay.safe (fa2 in
                adamw-attribution), else attribution.ranking's rule (named safe / fp32, or the
                fp32 kernel), as `flashprobe report` picks it
    components  each variant's config diff against its reference; the capture and the planned
                steps are left out (a branch source trained to its branch step, a borrowed
                reference of another length)
    mechanism   δ bias from the replays of the baseline's captures the digests hold (digest
                v3 `replay` of a baseline run: every variant it replayed, --variants-from ones
                included), pooled over those runs by replayed rows as replay_summary does

Each row gets a one-line reading of the training outcome: with 3 seeds a side Fisher's test
cannot reach p < 0.05, so such a difference is a lead, not a finding. Beside it, the same
runs pooled by each switch's value (attribution.pooling, as `flashprobe report` screens a
store): a screen across variants, which can reach significance where no single variant can.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashprobe.attribution.failure import FailureRule
from flashprobe.attribution.pooling import pooled_splits
from flashprobe.attribution.ranking import (
    SIGNIFICANT,
    Roles,
    component_diff,
    fisher_exact,
    outcomes,
    rank,
    resolve_roles,
)
from flashprobe.probes.bias_result import T_SIGNIFICANT
from flashprobe.reporting.digest.outcomes import (
    DIVERGED,
    NO_OUTCOME,
    NOT_DIVERGED,
    Branch,
    SeedOutcome,
    variant_outcomes,
)
from flashprobe.reporting.digest.reference import reference_runs
from flashprobe.reporting.digest.schema import DigestCell
from flashprobe.suites.declared import declared_config

#: Config keys that never make a component here (besides attribution.ranking.IGNORED_KEYS).
NOT_COMPONENTS = ("capture", "train.steps")
FAILURE = "explosion"  # the reading's word for a seed whose divergence rule fired


@dataclass(frozen=True)
class RankCell:
    """One seed as attribution.ranking reads a cell."""

    variant: str
    config: Mapping[str, Any]
    path: str
    summary: Mapping[str, Any] | None = None
    branch_from: str | None = None


@dataclass
class DigestRanking:
    suite: str
    baseline: str
    baseline_suite: str
    safe: str | None
    rows: list[dict[str, Any]]
    mechanism_from: list[str] = field(default_factory=list)  # the replayed runs used
    notes: list[str] = field(default_factory=list)
    #: The ranked runs pooled by switch value (attribution.pooling.pooled_splits' rows).
    pooled: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "baseline": self.baseline,
            "baseline_suite": self.baseline_suite,
            "safe": self.safe,
            "mechanism_from": self.mechanism_from,
            "rows": self.rows,
            "pooled": self.pooled,
            "notes": self.notes,
        }


def digest_ranking(
    suite: str,
    counted: Sequence[DigestCell],
    baseline: str,
    *,
    safe: str | None = None,
    declared: Mapping[str, Any] | None = None,
    horizon: int | None = None,
    branches: Mapping[str, Branch] | None = None,
) -> tuple[DigestRanking | None, list[str]]:
    """(the ranking of `suite`, or None; notes on what it left out or why there is none).
    `counted`: every suite's counted runs; `declared`: the suite's suite.json."""
    declared = declared or {}
    branches = branches or {}
    mine = [c for c in counted if c.suite == suite]
    if any(c.point for c in mine):
        return None, ["no ranking: the suite has grid points (flashprobe report ranks per store)"]
    found = reference_runs(suite, counted, baseline, horizon=horizon, branches=branches)
    others = sorted({c.seed for c in mine if c.variant != baseline})
    borrowed = [c for c in found.borrowed if c.seed in others]
    rows = variant_outcomes([*borrowed, *mine], horizon, branches=branches)
    by_variant = {o.variant: o for o in rows if o.suite == suite and o.variant != baseline}
    base_row = next((o for o in rows if o.variant == baseline and o.suite == found.suite), None)
    if base_row is None or not base_row.n:
        return None, [f"no ranking: the baseline {baseline} has no run with an outcome"]
    notes = []
    if found.suite != suite:
        notes.append(
            f"ranking: {baseline}'s outcome is its runs of suite {found.suite} on this suite's "
            f"seeds ({', '.join(map(str, others))}), the seeds the branched variants share"
        )
        lacking = sorted(set(others) - {s.seed for s in base_row.seeds})
        if lacking:
            notes.append(f"ranking: {baseline} of suite {found.suite} has no run on seed(s) "
                         f"{', '.join(map(str, lacking))}")  # fmt: skip
    own_base = next((c.config for c in mine if c.variant == baseline and c.config), None)
    base_config = own_base or next((c.config for c in borrowed if c.config), None)
    if base_config is None:
        return None, [f"no ranking: the digests hold no config of {baseline} (format v1)"]
    configs = {baseline: _component_config(base_config)}
    no_config = []
    for variant, row in by_variant.items():
        config = next((s.cell.config for s in row.seeds if s.cell.config), None)
        if config is None:
            no_config.append(variant)
        else:
            configs[variant] = _component_config(config)
    unranked = f"no config in the digests (format v1) of {', '.join(no_config)}"
    if len(configs) < 2:
        return None, [*notes, f"no ranking: {unranked}"] if no_config else []
    if no_config:
        notes.append(f"ranking: {unranked}: not ranked")
    cells, failed_at, known = _rank_inputs(
        [base_row.seeds, *(by_variant[v].seeds for v in configs if v != baseline)], configs
    )
    unrun = _unrun_safe(declared, safe, configs)  # the add design's reference, not run yet
    configs.update(unrun)
    roles, why = _roles(cells, baseline, next(iter(unrun), safe), declared, unrun)
    notes += why
    mechanism, sources, mech_notes = pooled_mechanism(
        [c for c in counted if c.suite in (suite, found.suite)], baseline
    )
    notes += mech_notes
    ranked = rank(cells, roles, mechanism, failed_at, FailureRule(horizon=horizon), known, unrun)
    if all(r["design"] in ("baseline", "safe") for r in ranked):
        return None, []  # nothing but the references: no designs to rank
    pooled = pooled_splits(cells, outcomes(cells, failed_at, known))
    seeds = {baseline: base_row.seeds}
    seeds.update({v: by_variant[v].seeds for v in configs if v != baseline and v not in unrun})
    for row in ranked:
        _add_columns(row, seeds[row["variant"]], configs, roles)
        if row.get("unjudged"):
            row["reading"] = (
                f"{row['variant']}: not judged: its reference {row['reference']} has no run "
                f"with an outcome in this suite yet ({row['variant']} explodes in "
                f"{row['failed']} of {row['seeds']})"
            )
        elif row["design"] in ("restore", "add"):
            ref = row["reference"]
            row["reading"] = reading(row, next(r for r in ranked if r["variant"] == ref), baseline)
            row["reading"] += _runaway_remark(seeds[row["variant"]])
    for row in ranked:
        row["suite"] = found.suite if row["variant"] == baseline else suite
        if row.get("baseline_setting") is False:  # no one-component add: unranked
            row.update(design="neither", rank=None)
    ranked.sort(key=lambda r: r["design"] == "neither")
    for i, row in enumerate((r for r in ranked if r["rank"] is not None), start=1):
        row["rank"] = i
    return (
        DigestRanking(suite, baseline, found.suite, roles.safe, ranked, sources, notes, pooled),
        [],
    )


# -- inputs ---------------------------------------------------------------------------------
def _component_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config without NOT_COMPONENTS (top-level sections, or one dotted key)."""
    out = {k: v for k, v in config.items() if k not in NOT_COMPONENTS}
    for key in NOT_COMPONENTS:
        head, _, tail = key.partition(".")
        if tail and isinstance(out.get(head), Mapping):
            out[head] = {k: v for k, v in out[head].items() if k != tail}
    return out


def _rank_inputs(
    groups: Sequence[Sequence[SeedOutcome]], configs: Mapping[str, Mapping[str, Any]]
) -> tuple[list[RankCell], dict[str, int | None], set[str]]:
    """RankCells, each one's failure step and the ones with an outcome (by path), as
    attribution.ranking.rank takes them."""
    cells, failed_at, known = [], {}, set()
    for seeds in groups:
        for s in seeds:
            path = f"{s.cell.suite}/{s.cell.name}/{s.seed}"
            cells.append(RankCell(s.cell.variant, configs[s.cell.variant], path))
            failed_at[path] = s.step if s.status == DIVERGED else None
            if s.status != NO_OUTCOME:
                known.add(path)
    return cells, failed_at, known


def _roles(
    cells: Sequence[RankCell],
    baseline: str,
    safe: str | None,
    declared: Mapping[str, Any],
    unrun: Collection[str] = (),
) -> tuple[Roles, list[str]]:
    replay = declared.get("replay") if isinstance(declared.get("replay"), Mapping) else {}
    components = replay.get("components") if isinstance(replay.get("components"), Mapping) else {}
    components = {str(k): str(v) for k, v in components.items()}
    if safe is None and _declared_safe(declared) in {c.variant for c in cells}:
        safe = _declared_safe(declared)
    roles = resolve_roles(cells, baseline, safe, components, unrun)  # as `flashprobe report`
    return roles, [f"ranking: {n}" for n in roles.notes]


def _unrun_safe(
    declared: Mapping[str, Any], safe: str | None, configs: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """{safe: its config} when the safe (given, else declared) has no run but its declaration
    resolves; else {} (a given safe without runs then fails in resolve_roles, as before)."""
    safe = safe or _declared_safe(declared)
    if safe is None or safe in configs:
        return {}
    derived = declared_config(declared, safe)
    return {} if derived is None else {safe: _component_config(derived)}


def _declared_safe(declared: Mapping[str, Any]) -> str | None:
    replay = declared.get("replay") if isinstance(declared.get("replay"), Mapping) else {}
    return str(replay["safe"]) if replay.get("safe") else None


def pooled_mechanism(
    cells: Sequence[DigestCell], baseline: str
) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
    """(variant → {delta_bias, delta_t_max}, the runs used, notes) from the replays of the
    baseline's runs: delta_bias pooled by replayed rows (Σ |Σ δ error| / Σ rows), as
    attribution.replay_summary.summarise pools its sources."""
    replays = [
        c for c in cells if c.variant == baseline and c.replay is not None and not c.replay.error
    ]
    sums: dict[str, list[float]] = {}
    t_max: dict[str, float] = {}
    for cell in replays:
        assert cell.replay is not None
        for variant, row in cell.replay.summary.items():
            bias, rows = row.get("delta_bias"), row.get("replayed_rows") or 1
            if bias is None:
                continue
            acc = sums.setdefault(variant, [0.0, 0.0, 0.0])
            acc[0] += float(bias) * rows
            acc[1] += rows
            acc[2] += 1
            t = row.get("delta_t_max")
            if t is not None and (variant not in t_max or abs(t) > abs(t_max[variant])):
                t_max[variant] = float(t)
    out = {v: {"delta_bias": s / n, "delta_t_max": t_max.get(v)} for v, (s, n, _) in sums.items()}
    used = [f"{c.label} (suite {c.suite})" for c in replays]
    notes = []
    if not replays:
        notes.append(f"ranking: no replay of {baseline}'s captures in the digests (format v3 "
                     "`replay`): no mechanism share")  # fmt: skip
        return out, used, notes
    partial = sorted(v for v, (_, _, k) in sums.items() if k < len(replays))
    if partial:
        notes.append(f"ranking: replayed on some of {baseline}'s runs only: {', '.join(partial)}")
    t_base = t_max.get(baseline)
    if t_base is not None and abs(t_base) < T_SIGNIFICANT:
        notes.append(
            f"ranking: {baseline}'s replayed δ error is not significantly biased in any layer, "
            f"head or step (largest |t| {abs(t_base):.1f} < {T_SIGNIFICANT:g}): the bias shares "
            "are noise"
        )
    return out, used, notes


# -- rows -----------------------------------------------------------------------------------
def _add_columns(
    row: dict[str, Any],
    seeds: Sequence[SeedOutcome],
    configs: Mapping[str, Mapping[str, Any]],
    roles: Roles,
) -> None:
    """The digest columns: the seeds, the failed ones, the median failure step, and whether an
    add row's change is the baseline's setting (else it is no one-component add)."""
    counted = [s for s in seeds if s.status != NO_OUTCOME]
    failed = [s for s in counted if s.status == DIVERGED]
    row["seed_list"] = [s.seed for s in counted]
    row["failed_seeds"] = [s.seed for s in failed]
    row["failure_steps"] = {str(s.seed): s.step for s in failed}
    row["steps_median"] = statistics.median(s.step for s in failed) if failed else None
    row["no_outcome_seeds"] = [s.seed for s in seeds if s.status == NO_OUTCOME]
    if row["design"] == "add" and roles.safe is not None:
        change = component_diff(configs[row["variant"]], configs[roles.safe])
        from_base = component_diff(configs[row["variant"]], configs[roles.baseline])
        row["baseline_setting"] = not set(change) & set(from_base)


def _runaway_remark(seeds: Sequence[SeedOutcome]) -> str:
    """Seeds counted as not exploding whose gradient norm ran away anyway: said beside the count
    (a slow blow-up short of the loss rule; the count stays the rule's)."""
    ran = [str(s.seed) for s in seeds if s.status == NOT_DIVERGED and s.runaway is not None]
    if not ran:
        return ""
    return f"; counted as not exploding but ran away in the gradient norm: seed {', '.join(ran)}"


def reading(row: Mapping[str, Any], ref: Mapping[str, Any], baseline: str) -> str:
    """What the training outcome says, in one line, honest about the seed counts."""
    name, what, other = row["variant"], row["component"], ref["variant"]
    k, n, rk, rn = row["failed"], row["seeds"], ref["failed"], ref["seeds"]
    if not n or not rn:
        return f"{name}: no outcome yet ({n} seeds counted; {other}: {rn})"
    versus = f"{other} {rk}/{rn}"
    if row["design"] == "add" and not row.get("baseline_setting", True):
        return (f"{name}: neither design: its changes to {other} ({what}) are not {baseline}'s "
                f"settings; explodes in {k} of {n} ({versus})")  # fmt: skip
    p = row["fisher_p"]
    if row["design"] == "restore":
        if rk == 0:
            return f"{name}: cannot tell: {other} did not explode on these seeds ({versus})"
        if k * rn >= rk * n:
            return f"{name}: no effect: restoring {what} still explodes in {k} of {n} ({versus})"
        said = f"restoring {what} removes the {FAILURE} in {n - k} of {n} seeds ({versus})"
        claim, best = f"{what} is needed", fisher_exact(0, n, rk, rn)
    else:
        if k * rn <= rk * n:
            return f"{name}: no effect: adding {what} to {other} explodes in {k} of {n} ({versus})"
        said = f"adding {what} to {other} explodes in {k} of {n} ({versus})"
        claim, best = f"{what} is enough", fisher_exact(n, n, rk, rn)
    if p is not None and p < SIGNIFICANT:
        return f"{name}: {said}: {claim} (Fisher p = {p:.2g})"
    cannot = f"; {n} vs {rn} seeds cannot reach p < {SIGNIFICANT:g}" if best >= SIGNIFICANT else ""
    return f"{name}: {said}: a lead that {claim}, not significant (Fisher p = {p:.2g}{cannot})"
