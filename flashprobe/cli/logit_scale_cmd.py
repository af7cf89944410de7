"""`flashprobe logit-scale`: each variant's error against fp64 as the attention logits grow."""

from __future__ import annotations

from pathlib import Path

import typer

from flashprobe.cli import app
from flashprobe.cli.path_args import file_path
from flashprobe.cli.plot_options import check_force
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.render import check_format, render

COLUMNS = ["target_logit", "variant", "o", "delta", "dq", "dk", "dv", "dq_vs_torch", "dq_cos"]
HEADERS = {
    "target_logit": "max logit",
    "o": "O",
    "delta": "δ",
    "dq": "dQ",
    "dk": "dK",
    "dv": "dV",
    "dq_vs_torch": "dQ ÷ torch",
    "dq_cos": "cos dQ",
}


@app.command("logit-scale")
def logit_scale_command(
    logits: str = typer.Option(
        "10,100,1000,4000", "--logits", help="Target max |logit| per head, comma-separated."
    ),
    variant: list[str] = typer.Option(
        [],
        "--variant",
        help="PRESET or PRESET:FIELD=VALUE,... (repeatable). Default: the presets.",
    ),
    variants_from: str | None = typer.Option(
        None,
        "--variants-from",
        help="Also every variant of this suite file (a path or a bundled name).",
    ),
    seed: list[int] = typer.Option([0], "--seed", help="Input seed (repeatable)."),
    seq: int = typer.Option(1024, "--seq", help="Sequence length (queries = keys)."),
    heads: int = typer.Option(4, "--heads", help="Heads (each scaled to the target)."),
    head_dim: int = typer.Option(64, "--head-dim", help="Head dimension."),
    causal: bool = typer.Option(True, "--causal/--full", help="Causal mask or none."),
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        parser=file_path,
        help="Also write a figure of O and dQ error against the logit (.png); refused when the "
        "file exists, unless --force.",
    ),
    force: bool = typer.Option(False, "--force", help="With --plot: replace the file."),
) -> None:
    """Measure how far each variant's O, δ, dQ, dK and dV are from fp64 as the logits grow.

    For each target L, q and k ~ N(0, 1) are scaled so that every head's largest visible
    |logit| is L, then rounded to bf16 (V, dO ~ N(0, 1) in bf16); each variant runs in the
    reference emulator (CPU) and its relative L2 error against the fp64 golden on the same
    inputs is printed, averaged over seeds. torch-bf16 is plain PyTorch attention in bf16 (the
    reference of the project's error gate); "dQ ÷ torch" is a variant's dQ error over its;
    "cos dQ" the cosine between the variant's dQ and the fp64 one (1: same direction).

    Examples:

      flashprobe logit-scale

      flashprobe logit-scale --variant paper-code --variant paper-code:score_precision=fp32

      flashprobe logit-scale --variants-from adamw-attribution.yaml --seed 0 --seed 1 --seed 2

      flashprobe logit-scale --logits 1000 --seq 512 --format json

      flashprobe logit-scale --variants-from adamw-attribution.yaml --plot errors.png
    """
    from flashprobe.probes.logit_scale import (
        LogitScaleConfig,
        run_logit_scale,
        variants_from_options,
    )

    check_format(fmt)
    check_force(plot, force)
    if plot is not None:
        from flashprobe.reporting.logit_scale_plot import check_plot_path, require_matplotlib

        check_plot_path(plot, force)
        require_matplotlib()
    variants, left_out = variants_from_options(variant, variants_from)
    if left_out:
        typer.echo(
            f"left out of {variants_from} (not one flashprobe kernel in every layer): "
            + ", ".join(left_out),
            err=True,
        )
    config = LogitScaleConfig(
        variants=variants,
        logits=_parse_logits(logits),
        seeds=tuple(dict.fromkeys(seed)),
        seq=seq,
        heads=heads,
        head_dim=head_dim,
        causal=causal,
    )
    report = run_logit_scale(config)
    rows = _table_rows(report)
    if fmt == "table":
        c = report.config
        mask = "causal" if c.causal else "no mask"
        typer.echo(
            f"Relative L2 error against fp64, mean over seeds {', '.join(map(str, c.seeds))} "
            f"(n = {len(c.seeds)}); 1 × {c.heads} heads × {c.seq} tokens, d {c.head_dim}, "
            f"{mask}; q, k, v, dO in bf16"
        )
        typer.echo(render("table", rows, columns=COLUMNS, headers=HEADERS))
    else:
        typer.echo(render(fmt, rows, document=report, columns=COLUMNS))
    if plot is not None:
        from flashprobe.reporting.logit_scale_plot import write_logit_scale_plot

        typer.echo(f"wrote {write_logit_scale_plot(report, plot)}", err=True)


def _parse_logits(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))  # float(" ") fails: no silent drop
    except ValueError:
        message = f"--logits must be numbers separated by commas, got {text!r}"
        raise FlashprobeError(message) from None


def _table_rows(report: object) -> list[dict[str, object]]:
    from flashprobe.probes.logit_scale import TORCH_REFERENCE

    rows = [r.to_dict() for r in report.rows]  # type: ignore[attr-defined]
    torch_dq = {r["target_logit"]: r["dq"] for r in rows if r["variant"] == TORCH_REFERENCE}
    for row in rows:
        reference = torch_dq.get(row["target_logit"])
        row["dq_vs_torch"] = row["dq"] / reference if row["dq"] is not None and reference else None
        row.pop("per_seed")
        row["target_logit"] = f"{row['target_logit']:g}"
    return rows
