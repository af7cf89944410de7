"""`flashprobe report`: a result store's suites as per-suite reports (summary, ranking,
pooled switches, metrics, hot spots).

`build_reports` gathers everything from the store (through the store's readers) into plain row
dicts, one SuiteReport per suite; report_tables renders them. A partially finished store is
reported as far as it goes, and `missing` says what is not there yet.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashprobe.attribution.failure import FailureRule, counted, failure_steps
from flashprobe.attribution.loss_rise import held_loss_rise, held_records
from flashprobe.attribution.pooling import pooled_splits
from flashprobe.attribution.ranking import METHOD, Roles, outcomes, rank, resolve_roles
from flashprobe.attribution.replay_summary import hot_spots, summarise
from flashprobe.attribution.runaway import GradientRunaway, gradient_runaway, runaway_note
from flashprobe.attribution.selection import Superseded, one_run_per_seed
from flashprobe.probes.bias_result import T_SIGNIFICANT
from flashprobe.reporting.training_data import mixed_data_note
from flashprobe.store import reader as sr
from flashprobe.store.metrics_check import store_notes
from flashprobe.store.replay_results import read_replay, read_suite_replay
from flashprobe.store.suite_definition import read_suite_definition, suite_failure, suite_roles
from flashprobe.suites.cell_config import horizon
from flashprobe.suites.declared import declared_config

SUPERSEDED_SHOWN = 5  # superseded runs named in the notes


@dataclass
class SuiteReport:
    suite: str
    roles: Roles
    summary: list[dict[str, Any]]
    ranking: list[dict[str, Any]]
    metrics: list[dict[str, Any]]
    hotspots: list[dict[str, Any]]
    missing: list[str]
    notes: list[str]
    pooled: list[dict[str, Any]] = field(default_factory=list)
    weight_gradient: str | None = None
    replay_docs: list[dict[str, Any]] = field(default_factory=list, repr=False)
    cells: list[sr.CellView] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "roles": self.roles.to_dict(),
            "method": METHOD,
            "summary": self.summary,
            "ranking": self.ranking,
            "pooled": self.pooled,
            "metrics": self.metrics,
            "hotspots": self.hotspots,
            "weight_gradient": self.weight_gradient,
            "missing": self.missing,
            "notes": self.notes,
        }


def build_reports(
    root: str | Path,
    suite: str | None = None,
    *,
    baseline: str | None = None,
    safe: str | None = None,
    top: int = 8,
    failure: FailureRule | None = None,
    horizon: int | None = None,
) -> list[SuiteReport]:
    """`failure`: what the ranking counts as a failed run (default: each suite's `failure:`
    section, else divergence); `horizon`: count outcomes at this step (attribution.failure)."""
    cells = sr.read_cells(root, suite)
    return [
        build_suite_report(
            name, members, baseline=baseline, safe=safe, top=top, failure=failure, horizon=horizon
        )
        for name, members in sr.suites_of(cells).items()
    ]


def build_suite_report(
    name: str,
    cells: list[sr.CellView],
    *,
    baseline: str | None = None,
    safe: str | None = None,
    top: int = 8,
    failure: FailureRule | None = None,
    horizon: int | None = None,
) -> SuiteReport:
    stored = read_suite_replay(sr.suite_dir(cells[0])) or {}
    rule = failure or FailureRule.from_suite(suite_failure(sr.suite_dir(cells[0])))
    if horizon is not None:
        rule = dataclasses.replace(rule, horizon=horizon)
    for cell in cells:
        n_layer = (cell.config.get("model") or {}).get("n_layer")
        if isinstance(n_layer, int):
            rule.check_layers(n_layer)
    every_run = cells
    cells, superseded = one_run_per_seed(every_run)
    saved = stored.get("roles") or {}
    # Roles: the command line, then the suite as ablate ran it (suite.json), then the replay's.
    declared = suite_roles(sr.suite_dir(cells[0])) or {}
    variants = {c.variant for c in cells}
    # The add design's reference declared but not run yet: its config from suite.json, so the
    # add rows are still told from the restores (and left unjudged).
    unrun = {}
    want_safe = safe or declared.get("safe")
    if want_safe and want_safe not in variants:
        definition = read_suite_definition(sr.suite_dir(cells[0])) or {}
        derived = declared_config(definition, want_safe)
        unrun = {} if derived is None else {want_safe: derived}
    declared = {k: v for k, v in declared.items() if k == "components" or v in variants}
    roles = resolve_roles(
        cells,
        baseline or declared.get("baseline") or saved.get("baseline"),
        want_safe if unrun else safe or declared.get("safe") or saved.get("safe"),
        declared.get("components") or saved.get("components") or {},
        unrun,
    )
    docs = [d for d in (read_replay(c) for c in cells) if d is not None]
    mechanism = summarise(docs)
    missing = _missing(cells, docs, name)
    failed_at = failure_steps(cells, rule, sources=every_run)
    known = counted(cells, failed_at, rule)
    ranking = rank(cells, roles, mechanism, failed_at, rule, known, unrun)
    pooled = pooled_splits(cells, outcomes(cells, failed_at, known))
    metrics = [{"variant": v, **m} for v, m in mechanism.items()]
    spots = [h for h in hot_spots(docs) if h["variant"] == roles.baseline]
    spots.sort(key=lambda h: -abs(h["delta_cumsum"]))
    notes = [*roles.notes, *(n for d in docs for n in d.get("notes", []))]
    if rule.event != "divergence" or rule.horizon is not None:
        notes.insert(0, f"failed (ranking): {rule.describe()}")
    notes += _run_notes(cells, superseded, known, rule)
    notes += mixed_data_note(cells)
    # Runaways the loss rule let pass: the summary's column (beside its `diverged` count); the
    # notes name those the ranking's rule let pass too.
    loss_rule = FailureRule(horizon=rule.horizon)
    runaways = _runaways(cells, failure_steps(cells, loss_rule), loss_rule)
    notes += runaway_note(
        (c.variant, c.seed, runaways[c.path])
        for c in cells
        if c.path in runaways and failed_at.get(c.path) is None
    )
    notes += store_notes(every_run)
    replayed_on = saved.get("baseline")
    if docs and replayed_on and replayed_on != roles.baseline:
        notes.append(
            f"the replay ran on {replayed_on}'s captures, not on the baseline {roles.baseline}'s: "
            f"the mechanism columns describe {replayed_on}'s training tensors (to change that: "
            f"flashprobe replay --baseline {roles.baseline} --force)"
        )
    t_base = (mechanism.get(roles.baseline) or {}).get("delta_t_max")
    if t_base is not None and abs(t_base) < T_SIGNIFICANT:
        notes.append(
            f"the baseline's δ error is not significantly biased in any replayed layer/head/step "
            f"(largest |t| {abs(t_base):.1f} < {T_SIGNIFICANT:g}): the bias shares are noise"
        )
    weight = stored.get("weight_gradient") or _weight(docs)
    return SuiteReport(
        suite=name,
        roles=roles,
        summary=_summary_rows(cells, runaways, rule.horizon),
        ranking=ranking,
        metrics=metrics,
        hotspots=spots[:top],
        missing=missing,
        notes=list(dict.fromkeys(notes)),
        pooled=pooled,
        weight_gradient=weight,
        replay_docs=docs,
        cells=cells,
    )


# -- gathering ------------------------------------------------------------------------------
def _summary_rows(
    cells: Sequence[sr.CellView],
    runaways: Mapping[Path, GradientRunaway],
    horizon: int | None = None,
) -> list[dict[str, Any]]:
    """One row a variant. `runaways`: the runs the loss rule let pass whose gradient norm ran
    away, shown beside its `diverged` count, and each finished run's held loss rise
    (attribution.loss_rise): a slow blow-up short of the rule still shows in one row,
    whatever the ranking's failure rule."""
    rows = []
    for variant in dict.fromkeys(c.variant for c in cells):
        mine = [c for c in cells if c.variant == variant]
        done = [c for c in mine if c.summary is not None]
        div = [c for c in done if c.summary.get("diverged")]  # type: ignore[union-attr]
        steps = [c.summary.get("steps_done") for c in done]  # type: ignore[union-attr]
        losses = [c.summary.get("final_loss") for c in done]  # type: ignore[union-attr]
        losses = [x for x in losses if isinstance(x, int | float) and math.isfinite(x)]
        minima = [c.summary.get("min_loss") for c in done]  # type: ignore[union-attr]
        minima = [x for x in minima if isinstance(x, int | float) and math.isfinite(x)]
        ran_away = [str(runaways[c.path].step) for c in mine if c.path in runaways]
        rises = [_loss_rise(c, horizon) for c in done]
        logits, leaks = _attention_maxima(mine)
        rows.append(
            {
                "variant": variant,
                "cells": len(mine),
                "finished": len(done),
                "seeds": ",".join(str(s) for s in sorted({c.seed for c in mine})),
                "diverged": len(div),
                "steps_done": ",".join(str(s) for s in steps) or None,
                "diverged_steps": ",".join(_diverged_steps(div)) or None,
                "final_loss": sum(losses) / len(losses) if losses else None,
                "min_loss": sum(minima) / len(minima) if minima else None,
                "ran_away": ",".join(ran_away) or None,
                "loss_rise": ",".join("-" if r is None else f"{r:.2f}" for r in rises) or None,
                "peak_logit": max(logits, default=None),
                "median_leak": statistics.median(leaks) if leaks else None,
            }
        )
    return rows


def _loss_rise(cell: sr.CellView, horizon: int | None) -> float | None:
    """The run's loss rise above its running minimum, held as long as its loss rule's patience
    (by `horizon` steps, if given)."""
    min_step, in_a_row = held_records(cell.config)
    records = ((r["step"], r.get("loss")) for r in sr.read_metrics(cell))
    last = None if horizon is None else horizon - 1
    return held_loss_rise(records, min_step=min_step, in_a_row=in_a_row, last_step=last)


def _attention_maxima(cells: Sequence[sr.CellView]) -> tuple[list[float], list[float]]:
    """Per recorded training step of these cells: the largest attention logit and the largest
    key-shift leak over layers and heads."""
    maxima = [sr.attention_maxima(record) for cell in cells for record in sr.read_metrics(cell)]
    return (
        [m["max_logit"] for m in maxima if "max_logit" in m],
        [m["key_shift_leak"] for m in maxima if "key_shift_leak" in m],
    )


def _diverged_steps(cells: Sequence[sr.CellView]) -> list[str]:
    return [str((c.summary or {}).get("diverged_step")) for c in cells]


def _missing(
    cells: Sequence[sr.CellView], docs: Sequence[Mapping[str, Any]], suite: str
) -> list[str]:
    out = []
    unfinished = [c for c in cells if not c.finished]
    if unfinished:
        shown = "; ".join(_where_stopped(c) for c in unfinished[:5])
        shown += " ..." if len(unfinished) > 5 else ""
        out.append(f"{len(unfinished)} of {len(cells)} cells unfinished: {shown}")
    for variant in dict.fromkeys(c.variant for c in cells):
        if not any(c.finished for c in cells if c.variant == variant):
            out.append(f"variant {variant}: no finished seed (no training outcome)")
    if not docs:
        out.append(
            f"no replay results: run `flashprobe replay {cells[0].path.parent.parent} --suite "
            f"{suite}` (needs captures)"
        )
    else:
        replayed = {r["variant"] for d in docs for r in d.get("records", [])}
        for variant in dict.fromkeys(c.variant for c in cells):
            if variant not in replayed:
                out.append(f"variant {variant}: not replayed (no mechanism metrics)")
    return out


def _where_stopped(cell: sr.CellView) -> str:
    """An unfinished cell by variant and seed, with its last logged step, loss and gradient norm
    (a cut pair still shows which way it was going)."""
    name = f"{cell.variant} seed {cell.seed}"
    last = next(reversed(sr.read_metrics(cell)), None)
    if last is None:
        return f"{name} (no step logged)"
    shown = {"loss": last.get("loss"), "gradient norm": last.get("grad_norm")}
    parts = [
        f"{label} {value:.3g}" for label, value in shown.items() if isinstance(value, int | float)
    ]
    return f"{name} at step {last['step']}" + (f" ({', '.join(parts)})" if parts else "")


def _run_notes(
    cells: Sequence[sr.CellView],
    superseded: Sequence[Superseded],
    known: Collection[Path],
    rule: FailureRule,
) -> list[str]:
    """What the counts leave out: superseded runs, differing horizons, runs short of the
    horizon."""
    out = []
    if superseded:
        shown = "; ".join(s.describe() for s in superseded[:SUPERSEDED_SHOWN])
        more = (
            f"; and {len(superseded) - SUPERSEDED_SHOWN} more"
            if len(superseded) > SUPERSEDED_SHOWN
            else ""
        )
        out.append(
            f"{len(superseded)} superseded run(s) not counted (each variant, grid point and seed "
            "counts once: a run with an outcome before a cut one, then its longest, then latest): "
            f"{shown}{more}"
        )
    horizons: dict[int, list[str]] = {}
    for variant in dict.fromkeys(c.variant for c in cells):
        for steps in sorted({horizon(c.config) for c in cells if c.variant == variant}):
            horizons.setdefault(steps, []).append(variant)
    if rule.horizon is None and len(horizons) > 1:
        listed = "; ".join(f"{s} steps: {', '.join(v)}" for s, v in sorted(horizons.items()))
        out.append(
            f"runs of different lengths ({listed}): a longer run has more time to fail; "
            f"--horizon N counts every run after N steps"
        )
    if rule.horizon is not None:
        short = [c.name for c in cells if c.path not in known and c.finished]
        if short:
            names = ", ".join(short[:5]) + (" ..." if len(short) > 5 else "")
            out.append(
                f"{len(short)} finished run(s) trained fewer than {rule.horizon} steps without "
                f"failing and have no outcome there: {names}"
            )
    return out


def _runaways(
    cells: Sequence[sr.CellView], failed_at: Mapping[Path, int | None], rule: FailureRule
) -> dict[Path, GradientRunaway]:
    """Runs that did not fail under `rule` whose gradient norm ran away (attribution.runaway),
    by cell path."""
    found = {}
    for cell in cells:
        if failed_at.get(cell.path) is not None:
            continue
        norms = ((r["step"], r.get("grad_norm")) for r in sr.read_metrics(cell))
        last = None if rule.horizon is None else rule.horizon - 1  # the horizon's last step
        if runaway := gradient_runaway(norms, last):
            found[cell.path] = runaway
    return found


def _weight(docs: Sequence[Mapping[str, Any]]) -> str | None:
    kinds = sorted({str(d.get("weight_gradient")) for d in docs if d.get("weight_gradient")})
    return " / ".join(kinds) if kinds else None
