"""`flashprobe bias`: the paper's biased-rounding claim, bit by bit and measured on rows."""

from __future__ import annotations

import typer

from flashprobe.cli import app
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.render import check_format, render

COLUMNS = [
    "name",
    "mean_error",
    "std_error",
    "t_stat",
    "frac_negative",
    "frac_away",
    "mean_abs_error",
    "excess_mean",
    "excess_t_stat",
    "excess_share",
    "p_bar_ones_per_row",
    "tie_events_per_row",
    "rowsum_mean",
    "rowsum_t",
    "verdict",
]
HEADERS = {
    "name": "variant",
    "mean_error": "mean err",
    "std_error": "std err",
    "t_stat": "t",
    "frac_negative": "frac<0",
    "frac_away": "frac away",
    "mean_abs_error": "mean|err|",
    "excess_mean": "excess",
    "excess_t_stat": "t excess",
    "excess_share": "excess/rnd",
    "p_bar_ones_per_row": "P̄=1/row",
    "tie_events_per_row": "tie ev/row",
    "rowsum_mean": "ΣP−1",
    "rowsum_t": "t ΣP",
}
CSV_COLUMNS = [
    "name",
    "label",
    "ties",
    "v_mean",
    "tail_v_mean",
    "mean_error",
    "std_error",
    "row_mean_std",
    "t_stat",
    "frac_negative",
    "frac_zero",
    "frac_away",
    "away_from_zero",
    "mean_abs_error",
    "excess_mean",
    "excess_t_stat",
    "excess_share",
    "p_bar_ones_per_row",
    "tie_events_per_row",
    "rowsum_mean",
    "rowsum_t",
    "shrunk_rows",
    "verdict",
]


@app.command("bias")
def bias_command(
    rows: int = typer.Option(1024, "--rows", help="Synthetic attention rows."),
    keys: int = typer.Option(1024, "--keys", help="Keys per row."),
    head_dim: int = typer.Option(64, "--head-dim", help="Head dimension (columns of V)."),
    ties: int = typer.Option(2, "--ties", help="Scores equal to the row max (1 = no tie)."),
    gap: str = typer.Option(
        "12:30", "--gap", help="LO:HI: the other scores sit uniformly this far below the max."
    ),
    max_score: str = typer.Option("1:5", "--max-score", help="LO:HI range of the row max."),
    v_mean: float = typer.Option(-2.5, "--v-mean", help="Mean of V (of the tied tokens' V)."),
    v_std: float = typer.Option(0.5, "--v-std", help="Standard deviation of V."),
    tail_v_mean: float | None = typer.Option(
        None, "--tail-v-mean", help="Mean of the non-tied tokens' V (default: --v-mean)."
    ),
    tie_placement: str = typer.Option(
        "tile",
        "--tie-placement",
        help="tile: ties inside one aligned 16-key group (same key tile for every block_n); "
        "anywhere: random keys (per-tile tie detection may miss them).",
    ),
    score_grid: str = typer.Option(
        "fp32",
        "--score-grid",
        help="fp32: scores as a kernel's fp32 q·kᵀ; bf16: scores on the bf16 grid.",
    ),
    variant: list[str] = typer.Option(
        [],
        "--variant",
        help="PRESET or PRESET:KEY=VALUE,... (repeatable). KEY: a kernel spec field, or "
        "ties / v_mean / tail_v_mean for this variant's rows. PRESET 'exact' = the fp64 O "
        "rounded once to bf16. Default: a list of standard, stabilized and control variants.",
    ),
    beta: list[float] = typer.Option(
        [], "--beta", help="β of the default list's stabilized variants (repeatable; 2 4 8)."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
) -> None:
    """Measure the one-sided rounding error of P̄V (paper §3.3.2) for kernel variants.

    First recomputes the paper's worked example from the float bits, then builds rows where
    --ties scores tie the row max and the rest sit --gap below it, with V ~ N(--v-mean,
    --v-std) in bf16, and runs each variant through the reference emulator. Error = O minus
    the fp64 softmax·V; t is over per-row means; "excess" = O minus the fp64 O rounded once to
    bf16 (what the kernel adds to ideal rounding); "excess/rnd" = the mean excess over the mean
    |error| of that ideal rounding; "frac away" = errors with the sign of --v-mean (away from
    zero). The verdict reads the excess only: biased when |t excess| >= 5 and |excess/rnd| >=
    5%, else "no bias beyond rounding".

    Examples:

      flashprobe bias

      flashprobe bias --v-mean 0

      flashprobe bias --variant paper-code --variant paper-sfa:beta=4 --rows 4096

      flashprobe bias --variant fa2 --variant fa2:softmax=stabilized,beta=4 --tail-v-mean 0

      flashprobe bias --variant paper-code:ties=1 --format json

      flashprobe bias --rows 32768 --keys 512 --ties 1 --gap 0.5:30 --max-score 1000:4000 --variant
      paper-code --variant paper-code:l_accumulator=fp32
    """
    from flashprobe.probes.bias import run_bias
    from flashprobe.probes.bias_config import (
        DEFAULT_BETAS,
        BiasConfig,
        default_variants,
        parse_range,
    )

    check_format(fmt)
    if beta and variant:
        raise FlashprobeError("--beta shapes the default list; with --variant use NAME:beta=X")
    config = BiasConfig(
        rows=rows,
        keys=keys,
        head_dim=head_dim,
        ties=ties,
        gap=parse_range(gap, "--gap"),
        max_score=parse_range(max_score, "--max-score"),
        v_mean=v_mean,
        v_std=v_std,
        tail_v_mean=tail_v_mean,
        tie_placement=tie_placement,
        score_grid=score_grid,
        variants=tuple(variant or default_variants(beta or DEFAULT_BETAS)),
        seed=seed,
        device=device,
    )
    report = run_bias(config)
    table = [r.to_dict() for r in report.variants]
    if fmt == "table":
        typer.echo(_header(report))
        typer.echo(render("table", table, columns=COLUMNS, headers=HEADERS))
        typer.echo("\nNotes:")
        for note in report.notes:
            typer.echo(f"- {note}")
    else:
        typer.echo(render(fmt, table, document=report, columns=CSV_COLUMNS))


def _header(report: object) -> str:
    from flashprobe.probes.bias_result import VERDICT_METHOD

    w = report.worked_example.to_dict()  # type: ignore[attr-defined]
    c = report.config  # type: ignore[attr-defined]
    e1, e2 = w["accumulator_exponent"], w["exact_exponent"]
    direction = "away from zero" if w["rounds_away_from_zero"] else "toward zero"
    sticky = "nonzero" if w["sticky_nonzero"] else "zero"
    tail = c.v_mean if c.tail_v_mean is None else c.tail_v_mean
    placement = "same 16-key group" if c.tie_placement == "tile" else "random keys"
    lines = [
        "Worked example (paper §3.3.2): fp32 accumulator = bf16 "
        f"{w['accumulator_bf16']} + residual {w['residual']:.6g} = {w['accumulator_fp32']!r}, "
        f"plus bf16 {w['addend_bf16']}",
        f"  accumulator significand   {w['accumulator_significand']} ×2^{e1}",
        f"  addend significand        {w['addend_significand']} ×2^{e1}",
        f"  aligned sum (carry)       {w['significand_sum']} ×2^{e1}",
        f"  renormalised, exact fp32  {w['exact_significand']} ×2^{e2} = {w['exact']!r}",
        f"  bf16 split                fraction {w['bf16_fraction']} | round bit "
        f"{w['round_bit']} | sticky {w['sticky_bits']} ({sticky})",
        f"  rounds to bf16            {w['bf16']} ({direction}); error {w['error']!r} "
        f"= -(half ulp {w['half_ulp']} - |residual|)",
        "",
        f"Rows: {c.rows} × {c.keys} keys, d {c.head_dim}; {c.ties} tied max ({placement}) in "
        f"[{c.max_score[0]:g}, {c.max_score[1]:g}], others {c.gap[0]:g}-{c.gap[1]:g} below "
        f"({c.score_grid} scores); "
        f"V ~ N({c.v_mean:g}, {c.v_std:g}) (tail mean {tail:g}) in bf16; seed {c.seed}; "
        f"device {c.device}",
        "Error = O − fp64 softmax(S)·V; t over per-row means; frac away = sign of v_mean; "
        "excess = O − bf16(fp64 O)",
        f"Verdict: {VERDICT_METHOD}",
        "",
    ]
    return "\n".join(lines)
