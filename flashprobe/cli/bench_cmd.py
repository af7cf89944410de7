"""`flashprobe bench`: time the Triton kernels against PyTorch SDPA (flash and cuDNN backends) and,
where installed, FlashAttention-2 and -3."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from flashprobe.cli import app
from flashprobe.cli.path_args import file_path
from flashprobe.errors import FlashprobeError
from flashprobe.probes import benchmark as bench
from flashprobe.reporting.atomic import check_output_folder, write_text_new


@app.command("bench")
def bench_command(
    preset: list[str] = typer.Option(
        ["fa2", "sfa"],
        "--preset",
        help="Kernel presets to time (repeatable); the first is the base.",
    ),
    seq: list[int] = typer.Option(
        [1024, 2048, 4096, 8192, 16384], "--seq", help="Sequence lengths (repeatable)."
    ),
    head_dim: list[int] = typer.Option([64, 128], "--head-dim", help="Head dims (repeatable)."),
    tokens: int = typer.Option(32768, help="batch × seq, kept constant across lengths."),
    heads: int = typer.Option(16, help="Attention (query) heads."),
    kv_heads: int | None = typer.Option(
        None, help="Key/value heads for grouped-query attention (default: --heads)."
    ),
    mask: str = typer.Option("both", help="causal, full or both."),
    dtype: str = typer.Option("bf16", help="bf16 or fp16."),
    mode: list[str] = typer.Option(list(bench.MODES), "--mode", help="fwd, bwd, fwd+bwd."),
    peers: bool = typer.Option(
        True,
        help="Also time SDPA flash and cuDNN, and FlashAttention-2 and -3 where installed.",
    ),
    stats: bool = typer.Option(True, help="Also time the first preset with instrumentation on."),
    dq: str = typer.Option(
        "ordered",
        help="How the presets' backward sums dQ: ordered (deterministic), atomic (fp32 atomics, "
        "summation order varies run to run; named <preset>+atomic-dq) or both.",
    ),
    json_path: Path | None = typer.Option(
        None, "--json", help="Write all timings to this new file.", parser=file_path
    ),
    seed: int = typer.Option(0, help="Seed for the random inputs."),
    repeats: int = typer.Option(
        3, help="Round-robin rounds per shape; each timing is the median of its rounds."
    ),
) -> None:
    """Time forward, backward and forward+backward against SDPA and FlashAttention; print
    TFLOP/s and ratios.

    TFLOP/s = 4·B·H·N²·D (×0.5 causal, ×2.5 backward); medians of triton.testing.do_bench,
    every implementation timed in this process on the same inputs, round-robin over
    --repeats rounds (the median round counts). A peer that is not installed, or does not
    support a shape or this GPU, gets one line saying so. Needs a CUDA GPU.

    Examples:

      flashprobe bench

      flashprobe bench --preset fa2 --seq 4096 --head-dim 128 --mask causal --json bench.json

      flashprobe bench --heads 32 --kv-heads 8 --head-dim 128   # grouped-query attention

      flashprobe bench --preset fa2 --dq both --no-stats   # ordered and atomic dQ, one grid
    """
    if json_path is not None and json_path.exists():
        raise FlashprobeError(f"{json_path} exists; choose a new --json path")
    if json_path is not None:  # before the timings: a grid takes minutes of GPU time
        check_output_folder(json_path.parent, "--json")
    causal = {"causal": (True,), "full": (False,), "both": (True, False)}.get(mask)
    if causal is None:
        raise FlashprobeError(f"--mask must be causal, full or both, got {mask!r}")
    shapes = [
        s
        for s in bench.default_shapes(seq, head_dim, tokens, heads, dtype, kv_heads)
        if s.causal in causal
    ]
    impls = bench.implementations(preset, instrumented=stats, peers=peers, dq=dq)
    timings = bench.run_benchmark(
        shapes,
        impls,
        mode,
        seed=seed,
        repeats=repeats,
        progress=lambda msg: typer.echo(f"  timing {msg}", err=True),
    )
    from flashprobe.reporting.bench_table import bench_tables

    typer.echo(bench_tables(timings, impls))
    if json_path is not None:
        from flashprobe.environment import environment

        payload = {
            "config": {
                "presets": preset,
                "seq": seq,
                "head_dim": head_dim,
                "tokens": tokens,
                "heads": heads,
                "kv_heads": kv_heads,
                "mask": mask,
                "dtype": dtype,
                "modes": mode,
                "dq": dq,
                "seed": seed,
                "repeats": repeats,
            },
            "specs": {i.name: i.spec.to_dict() for i in impls if i.spec is not None},
            "environment": environment("cuda"),
            "peers": bench.peer_versions(impls),
            "timings": [t.to_dict() for t in timings],
        }
        write_text_new(json_path, json.dumps(payload, indent=2))
        typer.echo(f"wrote {json_path}")
