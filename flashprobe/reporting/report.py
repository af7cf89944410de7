"""`flashprobe report`: a result store's suites as tables (summary, ranking, metrics, hot spots).

`build_reports` gathers everything from the store (through store.reader) into plain
row dicts; `render_reports` formats them as a text table, markdown (for an issue or a paper),
CSV (one table, `--table`) or JSON (everything). A partially finished store is reported as far
as it goes, and `missing` says what is not there yet.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashprobe.attribution.failure import FailureRule, counted, failure_steps
from flashprobe.attribution.pooling import pooled_splits
from flashprobe.attribution.ranking import METHOD, Roles, outcomes, rank, resolve_roles
from flashprobe.attribution.replay_summary import hot_spots, summarise
from flashprobe.attribution.runaway import gradient_runaway, runaway_note
from flashprobe.attribution.selection import Superseded, one_run_per_seed
from flashprobe.errors import FlashprobeError
from flashprobe.probes.bias_result import T_SIGNIFICANT
from flashprobe.reporting.render import WIDTH, fill, fit_table, render_csv, render_json
from flashprobe.store import reader as sr
from flashprobe.suites.cell_config import horizon
from flashprobe.suites.declared import declared_config

FORMATS = ("table", "markdown", "csv", "json")
TABLES = ("summary", "ranking", "pooled", "metrics", "hotspots")


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
    stored = sr.read_suite_replay(sr.suite_dir(cells[0])) or {}
    rule = failure or FailureRule.from_suite(sr.suite_failure(sr.suite_dir(cells[0])))
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
    declared = sr.suite_roles(sr.suite_dir(cells[0])) or {}
    variants = {c.variant for c in cells}
    # The add design's reference declared but not run yet: its config from suite.json, so the
    # add rows are still told from the restores (and left unjudged).
    unrun = {}
    want_safe = safe or declared.get("safe")
    if want_safe and want_safe not in variants:
        definition = sr.read_suite_definition(sr.suite_dir(cells[0])) or {}
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
    docs = [d for d in (sr.read_replay(c) for c in cells) if d is not None]
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
    notes += _runaway_notes(cells, failed_at, rule)
    notes += sr.store_notes(every_run) + sr.unread_notes(every_run)
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
        summary=_summary_rows(cells),
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


# -- rendering ------------------------------------------------------------------------------
def render_reports(
    reports: Sequence[SuiteReport], fmt: str, table: str = "ranking", *, wide: bool = False
) -> str:
    """`fmt` table fits WIDTH columns (wide tables split, text wrapped) unless `wide`."""
    if fmt not in FORMATS:
        raise FlashprobeError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if table not in TABLES:
        raise FlashprobeError(f"--table must be one of {', '.join(TABLES)}, got {table!r}")
    if fmt == "json":
        return render_json([r.to_dict() for r in reports])
    if fmt == "csv":
        rows = [{"suite": r.suite, **row} for r in reports for row in getattr(r, table)]
        return render_csv(rows, ["suite", *_CSV[table]])
    width = None if wide or fmt == "markdown" else WIDTH
    return "\n\n".join(_render_text(r, markdown=fmt == "markdown", width=width) for r in reports)


_RANK_COLS = ["rank", "variant", "design", "component", "failed", "rate", "fisher_p",
              "steps", "delta_bias", "mechanism_share", "score", "verdict"]  # fmt: skip
_METRIC_COLS = ["variant", "o_bias", "delta_bias", "delta_t_max", "dq_rel", "dk_rel", "dv_rel",
                "wq_rel", "wk_rel", "key_shift_leak", "key_shift_drift", "softmax_sum_bias",
                "wq_coherence",
                "wq_direction_similarity", "wq_rank1_share", "delta_coherence", "growth_exponent",
                "tie_events_per_row", "p_bar_ones_per_row"]  # fmt: skip
SUPERSEDED_SHOWN = 5  # superseded runs named in the notes
POOLED_SHOWN = 8  # rows of the pooled screen in text and markdown (all in CSV and JSON)
_POOLED_COLS = ["switch", "value", "same_split", "variants", "failed", "rest", "fisher_p",
                "adjusted_p"]  # fmt: skip
POOLED_METHOD = (
    "seeds pooled over the variants that share a switch value, against all other variants' "
    "seeds (Fisher's exact test; p adj. = p × the number of splits screened). A screen: the "
    "variants of one value differ in other switches too; test a surviving split with a "
    "one-switch variant."
)
_WRAPPED = {"component", "verdict", "variants", "same_split", "switch"}  # text columns that wrap
_HOT_COLS = ["layer", "head", "delta_mean", "delta_t", "delta_cumsum", "delta_coherence",
             "wq_coherence", "o_mean", "tie_events_per_row", "p_bar_ones_per_row"]  # fmt: skip
_SUMMARY_COLS = ["variant", "cells", "finished", "seeds", "diverged", "steps_done",
                 "diverged_steps", "final_loss", "peak_logit", "median_leak"]  # fmt: skip
_CSV = {
    "summary": _SUMMARY_COLS,
    "pooled": ["switch", "value", "same_split", "variants", "failed", "seeds", "rest_failed",
               "rest_seeds", "fisher_p", "adjusted_p"],
    "ranking": ["rank", "variant", "design", "component", "reference", "seeds", "unfinished",
                "failed", "rate", "rate_lo", "rate_hi", "fisher_p", "steps_mean", "steps_lo",
                "steps_hi", "delta_bias", "mechanism_share", "delta_p", "score", "verdict"],
    "metrics": [*_METRIC_COLS, "tied_rows", "softmax_sum_bias_tied", "softmax_sum_bias_untied",
                "softmax_sum_tied_share", "o_abs", "replayed_rows", "steps", "matches_capture"],
    "hotspots": ["variant", *_HOT_COLS],
}  # fmt: skip
_HEADERS = {
    "fisher_p": "Fisher p", "steps": "steps to fail", "delta_bias": "δ bias",
    "mechanism_share": "bias share", "o_bias": "O bias", "delta_t_max": "t δ (max)",
    "dq_rel": "dQ rel", "dk_rel": "dK rel", "dv_rel": "dV rel", "wq_rel": "dW_Q rel",
    "wk_rel": "dW_K rel", "wq_coherence": "W_Q coh.", "wq_direction_similarity": "W_Q dir sim",
    "wq_rank1_share": "rank-1 share", "delta_coherence": "δ coh.", "growth_exponent": "growth k",
    "tie_events_per_row": "ties/row", "p_bar_ones_per_row": "P̄=1/row", "delta_mean": "δ mean",
    "delta_t": "t δ", "delta_cumsum": "Σ δ err", "o_mean": "O mean", "steps_done": "steps",
    "diverged_steps": "diverged at", "final_loss": "final loss", "key_shift_leak": "K-shift leak",
    "key_shift_drift": "K-shift drift", "peak_logit": "peak logit",
    "median_leak": "K-shift leak (median)", "softmax_sum_bias": "ΣP−1",
    "same_split": "same split as", "rest": "other variants", "adjusted_p": "p adj.",
}  # fmt: skip


def _render_text(r: SuiteReport, *, markdown: bool, width: int | None) -> str:
    """Markdown, or text tables; with a `width`, wide tables split (repeating their key columns)
    and the text wrapped."""

    def heading(text: str) -> str:
        return f"## {text}" if markdown else f"{text}\n{'-' * len(text)}"

    def table(rows: list[dict[str, Any]], cols: list[str], keep: int = 1) -> str:
        if not rows:
            return "(none)"
        body = [[_show(row, c) for c in cols] for row in rows]
        names = [_HEADERS.get(c, c) for c in cols]
        if width is not None:
            wrap = [i for i, c in enumerate(cols) if c in _WRAPPED]
            return fit_table(body, names, keep=keep, width=width, wrap=wrap)
        return tabulate(body, headers=names, tablefmt="github" if markdown else "simple",
                        disable_numparse=True)  # fmt: skip

    def bullets(items: Sequence[str]) -> list[str]:
        return [fill(f"- {item}", width, indent="  ") for item in items]

    safe = r.roles.safe or "none (add design unavailable)"
    out = [
        (f"# Suite {r.suite}" if markdown else f"Suite {r.suite}"),
        f"Baseline: {r.roles.baseline}; all-safe: {safe}.",
        "",
        heading("Summary"),
        table(r.summary, _SUMMARY_COLS),
        "",
        heading("Ranking"),
        table(r.ranking, _RANK_COLS, keep=2),
        "",
        fill(f"Method: {METHOD}", width),
        "",
        heading("Pooled by switch value (a screen across variants)"),
        table(r.pooled[:POOLED_SHOWN], _POOLED_COLS, keep=2),
        "",
        fill(f"Method: {POOLED_METHOD}", width),
        "",
        heading("Per-variant mechanism metrics (replay on the baseline's captures)"),
        table(r.metrics, _METRIC_COLS),
    ]
    if r.weight_gradient:
        out.append(f"dW columns: {r.weight_gradient}.")
    out += ["", heading(f"Hot spots: {r.roles.baseline}'s layers and heads by |Σ δ err|")]
    out.append(table(r.hotspots, _HOT_COLS, keep=2))
    if r.missing:
        out += ["", heading("Missing"), *bullets(r.missing)]
    if r.notes:
        out += ["", heading("Notes"), *bullets(r.notes)]
    return "\n".join(out)


def _show(row: Mapping[str, Any], col: str) -> str:
    if col == "failed":
        return f"{row['failed']}/{row['seeds']}" if row.get("seeds") else "-"
    if col == "rest":
        return f"{row['rest_failed']}/{row['rest_seeds']}"
    if col == "rate":
        if row.get("rate") is None:
            return "-"
        return f"{row['rate']:.2f} [{row['rate_lo']:.2f}, {row['rate_hi']:.2f}]"
    if col == "steps":
        mean = row.get("steps_mean")
        if mean is None:
            return "-"
        if row.get("steps_lo") is None:
            return f"{mean:.0f}"
        return f"{mean:.0f} [{row['steps_lo']:.0f}, {row['steps_hi']:.0f}]"
    if col == "mechanism_share" and row.get(col) is not None:
        return f"{100 * row[col]:.0f}%"
    value = row.get(col)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format(value, ".3g") if math.isfinite(value) else str(value)
    return str(value)


# -- gathering ------------------------------------------------------------------------------
def _summary_rows(cells: Sequence[sr.CellView]) -> list[dict[str, Any]]:
    rows = []
    for variant in dict.fromkeys(c.variant for c in cells):
        mine = [c for c in cells if c.variant == variant]
        done = [c for c in mine if c.summary is not None]
        div = [c for c in done if c.summary.get("diverged")]  # type: ignore[union-attr]
        steps = [c.summary.get("steps_done") for c in done]  # type: ignore[union-attr]
        losses = [c.summary.get("final_loss") for c in done]  # type: ignore[union-attr]
        losses = [x for x in losses if isinstance(x, int | float) and math.isfinite(x)]
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
                "peak_logit": max(logits, default=None),
                "median_leak": statistics.median(leaks) if leaks else None,
            }
        )
    return rows


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
    unfinished = [c.name for c in cells if not c.finished]
    if unfinished:
        shown = ", ".join(unfinished[:5]) + (" ..." if len(unfinished) > 5 else "")
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
            f"counts once: its longest, then latest run): {shown}{more}"
        )
    horizons: dict[int, list[str]] = {}
    for variant in dict.fromkeys(c.variant for c in cells):
        for steps in sorted({horizon(c.config) for c in cells if c.variant == variant}):
            horizons.setdefault(steps, []).append(variant)
    if rule.horizon is None and len(horizons) > 1:
        listed = "; ".join(f"{s} steps: {', '.join(v)}" for s, v in sorted(horizons.items()))
        out.append(
            f"runs of different lengths ({listed}): a longer run has more time to fail; "
            f"--horizon N counts every run at step N"
        )
    if rule.horizon is not None:
        short = [c.name for c in cells if c.path not in known and c.finished]
        if short:
            names = ", ".join(short[:5]) + (" ..." if len(short) > 5 else "")
            out.append(
                f"{len(short)} finished run(s) ended before step {rule.horizon} without failing "
                f"and have no outcome there: {names}"
            )
    return out


def _runaway_notes(
    cells: Sequence[sr.CellView], failed_at: Mapping[Path, int | None], rule: FailureRule
) -> list[str]:
    """Runs that did not fail under `rule` whose gradient norm ran away (attribution.runaway)."""
    found = []
    for cell in cells:
        if failed_at.get(cell.path) is not None:
            continue
        norms = ((r["step"], r.get("grad_norm")) for r in sr.read_metrics(cell))
        if runaway := gradient_runaway(norms, rule.horizon):
            found.append((cell.variant, cell.seed, runaway))
    return runaway_note(found)


def _weight(docs: Sequence[Mapping[str, Any]]) -> str | None:
    kinds = sorted({str(d.get("weight_gradient")) for d in docs if d.get("weight_gradient")})
    return " / ".join(kinds) if kinds else None
