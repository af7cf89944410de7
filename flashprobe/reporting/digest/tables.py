"""`flashprobe digest-report`'s output: the per-suite reports (digest.report) as tables.

Markdown and text: per suite the outcomes, the control check, the ranking, the spectral norm
rise, the per-layer spectral norms of the chosen runs, the attention summary, the δ replay of
each replayed run, the superseded runs and the notes; JSON: each report's to_dict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest import attention as att
from flashprobe.reporting.digest.outcomes import step_text
from flashprobe.reporting.digest.ranking import DigestRanking
from flashprobe.reporting.digest.report import DigestSuiteReport
from flashprobe.reporting.digest.schema import DigestCell
from flashprobe.reporting.render import WIDTH, fill, fit_table, render_json
from flashprobe.reporting.report_tables import POOLED_METHOD, POOLED_SHOWN

FORMATS = ("markdown", "text", "json")
ORDER_SHOWN = 5  # layers of the rise order in the tables (all in JSON)
SUPERSEDED_SHOWN = 10
OUTCOME_COLS = ["variant", "seeds", "n", "diverged", "median divergence step",
                "steps per seed", "loss rise (held)"]  # fmt: skip
OUTCOME_LEGEND = (
    "n: seeds with an outcome. diverged: k/n. median divergence step: of the diverged seeds "
    "(0-based). steps per seed: its divergence step, or the steps it trained without "
    "diverging; no outcome: cut before finishing (or before the horizon) without diverging "
    "(≥: it may have trained past its last log or checkpoint), counted neither way. gradient "
    "runaway from S: its gradient norm reached 100× its earlier median at step S, before the "
    "rule fired or without it firing (the notes give the numbers of the latter; it changes no "
    "outcome). loss rise (held): how far each seed's loss stood above its running minimum for "
    "as long as its loss rule's patience, from the rule's min_step (a rise_margin rule fires at "
    "its margin; it changes no outcome)."
)
CONTROL_COLS = ["variant", "seeds", "bound (steps)", "verdict", "why"]
#: With more replayed variants than this, the per layer and step δ table shows the run's own
#: variant only (12 layers × 5 steps × 23 variants would be 1,380 rows); the others are in the
#: summary table, and every row is in the JSON.
DELTA_VARIANTS_SHOWN = 4
DELTA_COLS = ["variant", "layer", "step", "δ error mean", "sign", "t", "heads > 0",
              "running sum"]  # fmt: skip
DELTA_LEGEND = (
    "Error = the variant's δ = rowsum(dO∘O) − the fp64 golden's, replayed on the run's captured "
    "Q, K, V, dO (`flashprobe replay`). δ error mean: per row, over the layer's heads and "
    "captured tokens; t: that mean's t statistic over the rows of every head; heads > 0: "
    "heads whose mean δ error is positive; running sum: the δ error summed over tokens and "
    "heads, then over the captured steps so far (the paper's Fig. 5a). A bias: one sign at "
    "every step, |t| well above 2, a running sum that grows one way."
)
GRADIENT_LEGEND = (
    "The replayed dQ's relative L2 error against the fp64 golden on the same captures, over "
    "each layer's heads together (older replays: the mean of the heads'); per captured step "
    "before the divergence: the mean over the "
    "captured layers, and the layer with the largest error (layer: error). dK's is in the "
    "digest (`gradients`). `flashprobe logit-scale` shows the same error on synthetic inputs "
    "as the logits grow."
)
REPLAY_SUMMARY_COLS = ["variant", "δ bias per row", "largest δ t", "δ coherence",
                       "growth exponent", "O bias per row", "dQ rel. error",
                       "matches capture"]  # fmt: skip
REPLAY_SUMMARY_LEGEND = (
    "Over every captured step (after the divergence too), layer and head "
    "(attribution.replay_summary): δ bias: |Σ δ error| per (layer, head), summed, per row; "
    "largest δ t: the (step, layer, head) t largest in magnitude; δ coherence: |Σ_steps| / "
    "Σ_steps |·| of the δ error sums (1: one sign throughout); growth exponent: of the summed δ "
    "error over sequence prefixes (≈ 1 bias, ≈ 0.5 noise); dQ rel. error: every replayed dQ "
    "together, each head weighted by its exact norm, as for dK in the JSON (replays without "
    "the norms: the mean over records); matches capture: the replay of the run's own variant "
    "reproduces its captured O bit for bit."
)
RISE_COLS = ["variant", "seed", "matrix", "from step", "first to rise", "diverged at",
             "lead (steps)", "order", "largest growth"]  # fmt: skip
RISE_LEGEND = (
    "Lead = divergence step − first rise step (> 0: the rise came first). Order: the layers "
    "that rose, earliest first. Largest growth: the layer whose norm grew most (ratio) from the "
    "reference record to the last record before the divergence step."
)
LAYER_COLS = ["layer", "W_Q from", "W_Q until", "W_Q ×", "W_Q rise", "W_K from", "W_K until",
              "W_K ×", "W_K rise"]  # fmt: skip
ATTENTION_COLS = ["variant", "seed", "steps", "peak max logit (layer @ step)",
                  "max logit first ≥ 1e3 / 4e3 / 1e4", "tie events (layer with most)",
                  "P̄=1 entries (layer with most)", "ΣP − 1 (median)"]  # fmt: skip
ATTENTION_LEGEND = (
    "Counts at the first record → the last record before the divergence step (or the last "
    "one); they depend on the tile size (a tie counts per key tile) and the sampled batch: "
    "compare a variant with itself over time. Max logit first ≥: the first recorded step "
    "before the divergence at which the largest logit over layers reached 1e3, 4e3 and 1e4 "
    "(-: never), the scales at which `flashprobe logit-scale` finds bf16 scores' gradients "
    "wrong by half their size and by more than their size. ΣP − 1: the bias of the softmax "
    "sum the backward recomputes from the forward's lse (mean over layers; median over the "
    "records until that last one); > 0 when a bf16 running row sum drops the small terms."
)


def render_digest_reports(reports: Sequence[DigestSuiteReport], fmt: str) -> str:
    if fmt not in FORMATS:
        raise FlashprobeError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "json":
        return render_json([r.to_dict() for r in reports])
    return "\n\n".join(_render_text(r, markdown=fmt == "markdown") for r in reports)


def _render_text(r: DigestSuiteReport, *, markdown: bool) -> str:
    def heading(text: str) -> str:
        return f"## {text}" if markdown else f"{text}\n{'-' * len(text)}"

    def table(rows: list[list[Any]], headers: list[str]) -> str:
        if not rows:
            return "(none)"
        body = [[_show(v) for v in row] for row in rows]
        return tabulate(body, headers=headers, tablefmt="github" if markdown else "simple",
                        disable_numparse=True)  # fmt: skip

    point = ["point"] if r.has_points else []
    at = (f"after {r.horizon} steps (0-based steps 0–{r.horizon - 1})" if r.horizon is not None
          else "as far as each run went")  # fmt: skip
    ref = r.reference or "none"
    outcome_cols = [*OUTCOME_COLS[:1], *point, *OUTCOME_COLS[1:], f"Fisher p vs {ref}"]
    rise_cols = [*RISE_COLS[:1], *point, *RISE_COLS[1:]]
    if r.reference_suite not in (None, r.suite):
        ref += f" (suite {r.reference_suite})"
    out = [
        f"# Suite {r.suite}" if markdown else f"Suite {r.suite}",
        f"Reference: {ref}. Outcomes {at}.",
        "",
        heading("Outcomes"),
        table(_outcome_rows(r), outcome_cols),
        "",
        OUTCOME_LEGEND,
    ]
    if r.controls:
        out += ["", heading("Control check: twice the reference's median divergence step")]
        cols = [CONTROL_COLS[0], *point, *CONTROL_COLS[1:]]
        out += [_control_intro(r), "", table(_control_rows(r), cols)]
    if r.ranking is not None:
        out += ["", *_ranking_section(r.ranking, heading, markdown)]
    out += [
        "",
        heading(f"Spectral norm rise: which layer first ({r.rule.factor:g}× rule)"),
        table(_rise_rows(r), rise_cols),
        "",
        f"Rule: {r.rule.describe()}. {RISE_LEGEND}",
    ]
    for cell in r.chosen:
        rows = _layer_rows(r, cell)
        if rows:
            span = _span(r, cell)
            out += ["", heading(f"Spectral norms per layer: {cell.label}{span}")]
            out.append(table(rows, LAYER_COLS))
    out += ["", heading("Attention: max logit, tie events, P̄ = 1 entries (sum over heads)")]
    out.append(table(_attention_rows(r), [*ATTENTION_COLS[:1], *point, *ATTENTION_COLS[1:]]))
    out += ["", ATTENTION_LEGEND]
    for cell in r.replayed:
        out += ["", *_replay_section(cell, heading, table)]
    if r.superseded:
        out += ["", heading("Superseded runs")]
        shown = r.superseded[:SUPERSEDED_SHOWN]
        out += [f"- {s.describe()}" for s in shown]
        if len(r.superseded) > len(shown):
            out.append(f"- and {len(r.superseded) - len(shown)} more")
    if r.notes:
        out += ["", heading("Notes")] + [f"- {n}" for n in r.notes]
    return "\n".join(out)


def _outcome_rows(r: DigestSuiteReport) -> list[list[Any]]:
    rows = []
    for o in r.outcomes:
        rows.append(
            [
                o.variant + ("" if o.suite == r.suite else f" (suite {o.suite})"),
                *([o.point or "-"] if r.has_points else []),
                ",".join(str(s.seed) for s in o.seeds),
                o.n,
                f"{len(o.diverged)}/{o.n}",
                step_text(o.median_step),
                "; ".join(f"{s.seed}: {s.label}" for s in o.seeds),
                "; ".join(f"{s.seed}: {_rise_text(s.loss_rise)}" for s in o.seeds),
                o.fisher_p,
            ]
        )
    return rows


def _rise_text(rise: float | None) -> str:
    return "-" if rise is None else f"{rise:.2f}"


def _control_intro(r: DigestSuiteReport) -> str:
    bounds = {id(c.reference): (c.reference, c.bound) for c in r.controls}
    parts = []
    for ref, bound in bounds.values():
        where = "" if ref.suite == r.suite else f" of suite {ref.suite}"
        point = f" [{ref.point}]" if ref.point else ""
        seeds = ", ".join(f"{s.seed}: {s.step}" for s in ref.diverged)
        parts.append(
            f"{ref.variant}{where}{point}: median divergence step {step_text(bound / 2)} "
            f"(diverged seeds {seeds}), twice {step_text(bound)}"
        )
    return (
        "; ".join(parts) + ". A variant passes when none of its seeds diverged within twice "
        "that step and every seed ran at least that far (judged on each run's whole length)."
    )


def _control_rows(r: DigestSuiteReport) -> list[list[Any]]:
    return [
        [
            c.row.variant,
            *([c.row.point or "-"] if r.has_points else []),
            ",".join(str(s.seed) for s in c.row.seeds),
            step_text(c.bound),
            c.verdict,
            c.why,
        ]
        for c in r.controls
    ]


RANKING_COLS = ["rank", "variant", "design", "component", "seeds", "exploded (seeds)",
                "median step", "Δp", "Fisher p", "vs", "bias share"]  # fmt: skip
RANKING_LEGEND = (
    "attribution.ranking on the digests' outcomes. restore: the baseline with one component "
    "made safe, tested against the baseline's runs on the same seeds (Δp = p_baseline − "
    "p_variant); add: the safe variant with one baseline component (Δp = p_variant − p_safe). "
    "exploded: seeds whose divergence rule fired / seeds with an outcome; median step: of "
    "those; Fisher p: two-sided exact test against `vs`; bias share: of the baseline's replayed "
    "δ bias the change removes (restore) or reproduces (add). JSON: Wilson intervals, mean "
    "steps to failure, δ bias, score."
)


def _ranking_section(ranking: DigestRanking, heading: Any, markdown: bool) -> list[str]:
    """The table (text: fitted to WIDTH, the component wrapped), the readings, the legend."""
    body = [[_show(v) for v in _ranking_row(ranking, row)] for row in ranking.rows]
    if markdown:
        table = tabulate(body, headers=RANKING_COLS, tablefmt="github", disable_numparse=True)
    else:
        table = fit_table(body, RANKING_COLS, keep=2, width=WIDTH, wrap=[3])
    safe = ranking.safe or "none (no add design)"
    where = "" if ranking.baseline_suite == ranking.suite else f" (suite {ranking.baseline_suite})"
    intro = f"Baseline: {ranking.baseline}{where}; safe: {safe}."
    if ranking.mechanism_from:
        intro += f" δ bias: the replay of {', '.join(ranking.mechanism_from)}."
    readings = [r["reading"] for r in ranking.rows if r.get("reading")]
    return [
        heading("Ranking: one component restored (from the baseline) or added (to the safe)"),
        fill(intro, WIDTH),
        "",
        table,
        "",
        *(fill(f"- {line}", WIDTH, indent="  ") for line in readings),
        "",
        fill(RANKING_LEGEND, WIDTH),
        *_pooled_section(ranking, heading, markdown),
    ]


POOLED_COLS = ["switch", "value", "same split as", "variants", "exploded", "other variants",
               "Fisher p", "p adj."]  # fmt: skip


def _pooled_section(ranking: DigestRanking, heading: Any, markdown: bool) -> list[str]:
    """The ranked runs pooled by switch value: the first POOLED_SHOWN splits (all in JSON).
    None when every switch splits the variants one way (two variants): the ranking says it."""
    if len(ranking.pooled) < 2:
        return []
    body = [
        [_show(v) for v in (
            row["switch"], row["value"], row["same_split"], row["variants"],
            f"{row['failed']}/{row['seeds']}", f"{row['rest_failed']}/{row['rest_seeds']}",
            row["fisher_p"], row["adjusted_p"],
        )]
        for row in ranking.pooled[:POOLED_SHOWN]
    ]  # fmt: skip
    if markdown:
        table = tabulate(body, headers=POOLED_COLS, tablefmt="github", disable_numparse=True)
    else:
        table = fit_table(body, POOLED_COLS, keep=2, width=WIDTH, wrap=[2, 3])
    shown = len(body)
    more = (
        f" The first {shown} of {len(ranking.pooled)} splits."
        if len(ranking.pooled) > shown
        else ""
    )
    return [
        "",
        heading("Pooled by switch value (a screen across the ranked variants)"),
        table,
        "",
        fill(f"The ranked runs (exploded / with an outcome), {POOLED_METHOD}{more}", WIDTH),
    ]


def _ranking_row(ranking: DigestRanking, row: Mapping[str, Any]) -> list[Any]:
    failed = "-"
    if row["seeds"]:
        failed = f"{row['failed']}/{row['seeds']}"
        if row["failed_seeds"]:
            failed += f" ({','.join(map(str, row['failed_seeds']))})"
    share = row.get("mechanism_share")
    variant = row["variant"]
    if row["suite"] != ranking.suite:
        variant += f" (suite {row['suite']})"
    return [
        row["rank"], variant, row["design"], row["component"],
        ",".join(map(str, row["seed_list"])) or None, failed, step_text(row["steps_median"]),
        row.get("delta_p"), row.get("fisher_p"), row.get("reference"),
        None if share is None else f"{100 * share:.0f}%",
    ]  # fmt: skip


def _replay_section(cell: DigestCell, heading: Any, table: Any) -> list[str]:
    replay = cell.replay
    assert replay is not None
    title = f"δ replay: {cell.label}"
    if replay.error is not None:
        return [heading(title), f"Its replay.json was not read: {replay.error}"]
    diverged = cell.diverged_step
    layers = ", ".join(map(str, replay.layers)) or "-"
    steps = ", ".join(map(str, replay.steps)) or "-"
    later = [s for s in replay.steps if diverged is not None and s >= diverged]
    scope = (
        f"the run diverged at step {diverged}: the captures before it"
        if diverged is not None
        else "the run did not diverge: every capture"
    )
    if later:
        what = "the capture at step" if len(later) == 1 else "the captures at steps"
        scope += f" (left out: {what} {', '.join(map(str, later))})"
    shown = _replay_variants(cell)
    if len(shown) > DELTA_VARIANTS_SHOWN:
        scope += (
            f"; per layer and step: {cell.variant} only, the other {len(shown) - 1} replayed "
            "variants are summarised below (the JSON format has every row)"
        )
        shown = shown[:1]
    out = [
        heading(title),
        f"Captures of layers {layers} at steps {steps} of {replay.source_cell or cell.name}, "
        f"replayed on the {replay.backend or '?'} backend; {scope}.",
        "",
        table(_delta_rows(cell, shown), DELTA_COLS),
        "",
        DELTA_LEGEND,
    ]
    gradient_steps = _gradient_steps(cell)
    if gradient_steps:
        out += [
            "",
            table(_gradient_rows(cell, gradient_steps), ["variant", *gradient_steps]),
            "",
            GRADIENT_LEGEND,
        ]
    out += [
        "",
        table(_replay_summary_rows(cell), REPLAY_SUMMARY_COLS),
        "",
        REPLAY_SUMMARY_LEGEND,
    ]
    notes = [*replay.notes]
    if replay.weight_gradient:
        notes.append(f"weight gradient: {replay.weight_gradient}")
    out += [f"- {n}" for n in notes]
    return out


def _replay_variants(cell: DigestCell) -> list[str]:
    """The run's own variant first, then the digest's order."""
    assert cell.replay is not None
    names = cell.replay.variants
    return sorted(names, key=lambda v: v != cell.variant)


def _delta_rows(cell: DigestCell, variants: Sequence[str]) -> list[list[Any]]:
    assert cell.replay is not None
    order = {v: i for i, v in enumerate(variants)}
    rows = [x for x in cell.replay.rows(before=cell.diverged_step) if x[0] in order]
    rows.sort(key=lambda x: order[x[0]])
    return [
        [variant, layer, d.step, d.mean, d.sign, d.t, f"{d.heads_positive}/{d.heads}",
         d.running_sum]
        for variant, layer, d in rows
    ]  # fmt: skip


def _gradient_steps(cell: DigestCell) -> dict[str, int]:
    """Column header → captured step, for the steps before the divergence with gradients."""
    assert cell.replay is not None
    diverged = cell.diverged_step
    steps = sorted({g.step for layers in cell.replay.gradients.values()
                    for rows in layers.values() for g in rows
                    if diverged is None or g.step < diverged})  # fmt: skip
    return {f"dQ error @ {step}": step for step in steps}


def _gradient_rows(cell: DigestCell, steps: Mapping[str, int]) -> list[list[Any]]:
    assert cell.replay is not None
    rows = []
    for variant in _replay_variants(cell):
        layers = cell.replay.gradients.get(variant, {})
        row: list[Any] = [variant]
        for step in steps.values():
            errors = {layer: g.dq_rel for layer, gs in layers.items() for g in gs
                      if g.step == step and g.dq_rel is not None}  # fmt: skip
            if not errors:
                row.append(None)
                continue
            worst = max(errors, key=lambda layer: (errors[layer], -layer))
            mean = sum(errors.values()) / len(errors)
            row.append(f"{mean:.3g} ({worst}: {errors[worst]:.3g})")
        rows.append(row)
    return rows


def _replay_summary_rows(cell: DigestCell) -> list[list[Any]]:
    assert cell.replay is not None
    rows = []
    for variant in _replay_variants(cell):
        x = cell.replay.summary.get(variant, {})
        rows.append(
            [variant, x.get("delta_bias"), x.get("delta_t_max"), x.get("delta_coherence"),
             x.get("growth_exponent"), x.get("o_bias"), x.get("dq_rel"),
             x.get("matches_capture")]
        )  # fmt: skip
    return rows


def _rise_rows(r: DigestSuiteReport) -> list[list[Any]]:
    rows = []
    for x in r.rises:
        first = x.first
        big = x.largest_growth
        order = x.order
        shown = ", ".join(str(o.layer) for o in order[:ORDER_SHOWN])
        if len(order) > ORDER_SHOWN:
            shown += ", ..."
        label = "" if x.trajectory.series in ("wq", "wk") else " (largest head)"
        rows.append(
            [
                x.cell.variant,
                *([x.cell.point_label or "-"] if r.has_points else []),
                x.cell.seed,
                x.trajectory.matrix + label,
                x.reference_step,
                (
                    f"layer {', '.join(str(f.layer) for f in first)} @ {x.first_step}"
                    if first
                    else (x.note or "none")
                ),
                x.diverged_step,
                x.lead,
                shown or None,
                None if big is None else f"layer {big.layer} ×{_ratio(big.growth)} to {x.end_step}",
            ]
        )
    return rows


def _layer_rows(r: DigestSuiteReport, cell: DigestCell) -> list[list[Any]]:
    mine = {x.trajectory.matrix: x for x in r.rises if x.cell is cell}
    layers = sorted({lr.layer for x in mine.values() for lr in x.layers})
    rows = []
    for layer in layers:
        row: list[Any] = [layer]
        for matrix in ("W_Q", "W_K"):
            x = mine.get(matrix)
            lr = next((lr for lr in x.layers if lr.layer == layer), None) if x else None
            if lr is None:
                row += [None] * 4
            else:
                row += [lr.reference, lr.end, _ratio(lr.growth), lr.rise_step]
        rows.append(row)
    return rows


def _span(r: DigestSuiteReport, cell: DigestCell) -> str:
    mine = [x for x in r.rises if x.cell is cell and x.reference_step is not None]
    if not mine:
        return ""
    return f" (from step {mine[0].reference_step} until {mine[0].end_step})"


def _attention_rows(r: DigestSuiteReport) -> list[list[Any]]:
    rows = []
    for a in r.attention:
        peak = a.peak_logit
        rows.append(
            [
                a.cell.variant,
                *([a.cell.point_label or "-"] if r.has_points else []),
                a.cell.seed,
                f"{a.first_step} → {'-' if a.end_step is None else a.end_step}",
                None if peak is None else f"{peak[0]:.3g} (layer {peak[1]} @ {peak[2]})",
                " / ".join("-" if step is None else str(step) for _, step in a.crossings),
                att.AttentionSummary.change(a.ties),
                att.AttentionSummary.change(a.p_bar_ones),
                None if a.sum_bias is None else f"{a.sum_bias:+.2g}",
            ]
        )
    return rows


def _ratio(value: float | None) -> str | None:
    """Three decimals: a ratio just under the rise factor must not print as the factor."""
    return None if value is None else f"{value:.3f}"


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e6:
            return str(int(value))
        return format(value, ".3g") if math.isfinite(value) else str(value)
    return str(value)
