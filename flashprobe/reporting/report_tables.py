"""`flashprobe report`'s output: the per-suite reports (reporting.report) as tables.

`render_reports` formats them as a text table (fitted to WIDTH columns unless `wide`), markdown
(for an issue or a paper), CSV (one table, `--table`) or JSON (everything, each report's
to_dict).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from flashprobe.attribution.ranking import METHOD
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.render import WIDTH, fill, fit_table, render_csv, render_json
from flashprobe.reporting.report import SuiteReport

FORMATS = ("table", "markdown", "csv", "json")
TABLES = ("summary", "ranking", "pooled", "metrics", "hotspots")


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
SUMMARY_NOTE = (
    "loss rise (held): per finished seed, how far its loss stood above its running minimum "
    "for as long as its loss rule's patience, from the rule's min_step, on the logged records "
    "(a rise_margin rule fires at its margin); it changes no count."
)
_SUMMARY_COLS = ["variant", "cells", "finished", "seeds", "diverged", "steps_done",
                 "diverged_steps", "ran_away", "loss_rise", "final_loss", "min_loss",
                 "peak_logit", "median_leak"]  # fmt: skip
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
    "diverged_steps": "diverged at", "final_loss": "final loss", "min_loss": "min loss",
    "ran_away": "grad runaway at", "loss_rise": "loss rise (held)",
    "key_shift_leak": "K-shift leak",
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
        fill(SUMMARY_NOTE, width),
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
