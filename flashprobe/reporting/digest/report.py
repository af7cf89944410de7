"""`flashprobe digest-report`: the results of several digests as tables (markdown, text, JSON).

Per suite: the outcomes per variant (digest.outcomes) with Fisher's exact test against a
reference variant and the control check of issue 23 (twice the reference's median divergence
step), the spectral norm rise per run (digest.rise), the per-layer spectral norms of the
chosen runs, the attention summary per run (digest.attention), the superseded runs
(digest.pooling) and notes on what the counts leave out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest import attention as att
from flashprobe.reporting.digest.outcomes import VariantOutcome, control_check, variant_outcomes
from flashprobe.reporting.digest.pooling import Superseded, one_run_per_seed
from flashprobe.reporting.digest.rise import RiseResult, RiseRule, rises, trajectories
from flashprobe.reporting.digest.schema import Digest, DigestCell, load_digest
from flashprobe.reporting.render import render_json

FORMATS = ("markdown", "text", "json")
ORDER_SHOWN = 5  # layers of the rise order in the tables (all in JSON)
SUPERSEDED_SHOWN = 10
OUTCOME_COLS = ["variant", "seeds", "n", "diverged", "diverged at", "median step",
                "not diverged (steps)", "no outcome (steps)"]  # fmt: skip
OUTCOME_LEGEND = (
    "n: seeds with an outcome. diverged at: seed: step (0-based). median step: of the diverged "
    "seeds. no outcome: cut before finishing (or before the horizon) without diverging; "
    "counted neither way."
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
                  "tie events (layer with most)", "P̄=1 entries (layer with most)"]  # fmt: skip
ATTENTION_LEGEND = (
    "Counts at the first record → the last record before the divergence step (or the last "
    "one); they depend on the tile size (a tie counts per key tile) and the sampled batch: "
    "compare a variant with itself over time."
)


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

    @property
    def has_points(self) -> bool:
        return any(c.point for c in self.cells)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "reference": self.reference,
            "horizon": self.horizon,
            "rise_rule": self.rule.describe(),
            "outcomes": [o.to_dict() for o in self.outcomes],
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


def build_digest_reports(
    digests: Sequence[Digest],
    *,
    suite: str | None = None,
    horizon: int | None = None,
    reference: str | None = None,
    rule: RiseRule | None = None,
    chosen: Sequence[str] = (),
) -> list[DigestSuiteReport]:
    """One report per suite (or only `suite`). `chosen`: runs as VARIANT:SEED for the
    per-layer tables and figures (default: the reference's first diverged seed)."""
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
    if reference is not None and not any(c.variant == reference for c in every if c.suite in names):
        variants = sorted({c.variant for c in every if c.suite in names})
        raise FlashprobeError(
            f"no variant {reference!r} in the digests; variants: {', '.join(variants)}"
        )
    declared = _declared_references(digests)
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
) -> DigestSuiteReport:
    cells, superseded = one_run_per_seed(every)
    variants = {c.variant for c in cells}
    notes = [_sources(digests, name)]
    if reference is not None and reference not in variants:
        notes.append(f"no reference variant {reference!r} in this suite: no Fisher tests")
        reference = None
    elif reference is not None and inferred:
        notes.append(f"reference: {reference} (the suite's declared baseline; --reference)")
    if reference is None:
        notes.append("no reference variant: --reference VARIANT adds Fisher tests and controls")
    cells = sorted(cells, key=lambda c: (c.variant != reference, c.variant, c.point_label, c.seed))
    outcomes = variant_outcomes(cells, horizon, reference)
    if reference is not None:
        notes += control_check(outcomes, reference)
    notes += _run_notes(cells, superseded, horizon)
    results = rises(cells, rule, horizon)
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
        chosen=choose_cells(cells, chosen, reference),
        superseded=superseded,
        notes=notes,
        cells=cells,
    )


def choose_cells(
    cells: Sequence[DigestCell], wanted: Sequence[str], reference: str | None
) -> list[DigestCell]:
    """The runs named VARIANT:SEED (a one-line error for one that is not there), else the
    reference's first diverged seed, else its first seed, else the first run."""
    out = []
    for text in wanted:
        variant, _, seed = text.rpartition(":")
        if not variant or not seed.lstrip("-").isdigit():
            raise FlashprobeError(f"--cell must be VARIANT:SEED, got {text!r}")
        found = [c for c in cells if c.variant == variant and c.seed == int(seed)]
        if not found:
            runs = ", ".join(f"{c.variant}:{c.seed}" for c in cells)
            raise FlashprobeError(f"no run {text!r} in the digests; runs: {runs}")
        out += [c for c in found if c not in out]
    if out or not cells:
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
            "counts once: its longest, then latest run; listed below)"
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
            "a longer run has more time to diverge; --horizon N counts every run at step N"
        )
    return out


# -- rendering ------------------------------------------------------------------------------
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
    at = f"at step {r.horizon}" if r.horizon is not None else "as far as each run went"
    ref = r.reference or "none"
    outcome_cols = [*OUTCOME_COLS[:1], *point, *OUTCOME_COLS[1:], f"Fisher p vs {ref}"]
    rise_cols = [*RISE_COLS[:1], *point, *RISE_COLS[1:]]
    out = [
        f"# Suite {r.suite}" if markdown else f"Suite {r.suite}",
        f"Reference: {ref}. Outcomes {at}.",
        "",
        heading("Outcomes"),
        table(_outcome_rows(r), outcome_cols),
        "",
        OUTCOME_LEGEND,
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
                o.variant,
                *([o.point or "-"] if r.has_points else []),
                ",".join(str(s.seed) for s in o.seeds),
                o.n,
                f"{len(o.diverged)}/{o.n}",
                ", ".join(f"{s.seed}: {s.step}" for s in o.diverged) or None,
                o.median_step,
                ", ".join(f"{s.seed}: {s.step}" for s in o.not_diverged) or None,
                ", ".join(f"{s.seed}: {_bound(s.cell)}{s.step}" for s in o.no_outcome) or None,
                o.fisher_p,
            ]
        )
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
                att.AttentionSummary.change(a.ties),
                att.AttentionSummary.change(a.p_bar_ones),
            ]
        )
    return rows


def _ratio(value: float | None) -> str | None:
    """Three decimals: a ratio just under the rise factor must not print as the factor."""
    return None if value is None else f"{value:.3f}"


def _bound(cell: DigestCell) -> str:
    return "" if cell.reached_is_exact else "≥"


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
