"""Training throughput on one GPU: GPT-2 124M with flashprobe's Triton kernel against SDPA.

    PYTHONUNBUFFERED=1 python scripts/gpu_throughput.py --out $OUT [--steps 40] [--kv-heads 4]

Runs, in one process and on identical data, short `train_run`s of GPT-2 124M (12 layers,
12 heads, 768 wide, seq 1024, bf16 autocast, AdamW) with
  1. PyTorch SDPA attention (the peer),
  2. flashprobe `fa2` on the Triton kernels,
  3. flashprobe `sfa` (the paper's stabilized softmax) on the Triton kernels,
  4. `fa2` with instrumentation and metrics on (attention stats every step, W_Q/W_K
     spectral norms every 10 steps),
(with --kv-heads N: grouped-query attention, N key/value heads; the model then differs from
GPT-2 124M by its smaller c_attn) and reports the median tokens/s over the steps after a
warm-up (compilation excluded), plus
the ratios the ablate issue asks for (≥ 0.9× and ≥ 0.8× SDPA). Each variant also runs with
`train.compile` (name + "+compile") and with compile mode "reduce-overhead" (CUDA graphs,
name + "+cudagraphs"), each against SDPA run the same way. Also times the attention
call alone at this shape (forward + backward): its wall time, and the host time it takes to
issue it (measured behind a long GPU sleep, so the host never waits), with kernel relaunches
on (`kernels.fastlaunch`) and off (every launch through `JITFunction.run`).

Writes OUT/throughput.json. Without a CUDA GPU, with bad settings, with an --out that is a file
or an OUT/throughput.json that exists, it stops before creating anything: one line on stderr,
exit code 2.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashprobe.errors import OneLineParser  # noqa: E402 (after the path)

GPT2 = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "vocab_size": 50304}
VARIANTS = {
    "sdpa": ({"impl": "sdpa"}, {"attention_stats_every": 0, "spectral_every": 0}),
    "fa2-triton": (
        {"impl": "flashprobe", "spec": "fa2", "backend": "triton"},
        {"attention_stats_every": 0, "spectral_every": 0},
    ),
    "sfa-triton": (
        {"impl": "flashprobe", "spec": "sfa", "backend": "triton"},
        {"attention_stats_every": 0, "spectral_every": 0},
    ),
    "fa2-triton+metrics": (
        {"impl": "flashprobe", "spec": "fa2", "backend": "triton"},
        {"attention_stats_every": 1, "spectral_every": 10},
    ),
}


#: Name suffix → train.compile_mode (None: eager).
COMPILE_MODES = {"": None, "+compile": "default", "+cudagraphs": "reduce-overhead"}


def split_name(name: str) -> tuple[str, str]:
    """ "fa2-triton+compile" → ("fa2-triton", "+compile")."""
    for suffix in COMPILE_MODES:
        if suffix and name.endswith(suffix):
            return name.removesuffix(suffix), suffix
    return name, ""


def variant_config(name: str, steps: int, batch: int, kv_heads: int | None = None) -> Any:
    """The TrainConfig of one variant (a FlashprobeError for settings no run can have)."""
    from flashprobe.train import TrainConfig

    base, suffix = split_name(name)
    attention, metrics = VARIANTS[base]
    mode = COMPILE_MODES[suffix]
    return TrainConfig.from_dict(
        {
            "model": {**GPT2, "n_kv_head": kv_heads, "attention": attention},
            "optimizer": {"lr": 6e-4},
            "schedule": {"warmup_steps": 10},
            "train": {
                "steps": steps,
                "batch_size": batch,
                "device": "cuda",
                "seed": 0,
                "checkpoint_final": False,
                "compile": mode is not None,
                "compile_mode": mode or "default",
            },
            "metrics": {"eval_every": 0, **metrics},
        }
    )


def run_variant(
    name: str, steps: int, batch: int, warmup: int, out_dir: Path, kv_heads: int | None = None
) -> dict:
    from flashprobe.train import train_run

    config = variant_config(name, steps, batch, kv_heads)
    summary = train_run(config, out_dir / name)
    lines = (out_dir / name / "metrics.jsonl").read_text().splitlines()
    rates = [json.loads(line)["tokens_per_s"] for line in lines if '"tokens_per_s"' in line]
    steady = rates[warmup:]
    return {
        "variant": name,
        "median_tokens_per_s": statistics.median(steady),
        "steps_timed": len(steady),
        "final_loss": summary.final_loss,
    }


def attention_only(batch: int) -> dict:
    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    from triton.testing import do_bench

    import flashprobe
    from flashprobe.kernels import launch

    shape = (batch, GPT2["n_head"], GPT2["block_size"], GPT2["n_embd"] // GPT2["n_head"])
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.requires_grad_() for t in (q, k, v)]
    launchers = (launch._FORWARD, launch._PREPROCESS, launch._BACKWARD)

    def ours() -> None:
        flashprobe.attention(*leaves, causal=True, spec="fa2", backend="triton").backward(do)

    def peer() -> None:
        sdpa(*leaves, is_causal=True).backward(do)

    def host_ms(fn, calls: int = 50) -> float:  # type: ignore[no-untyped-def]
        fn()
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000_000)  # ~1 s of GPU work queued ahead: the host never waits
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        torch.cuda.synchronize()
        return 1e3 * elapsed / calls

    result: dict = {"shape": list(shape)}
    for relaunch in (True, False):
        for launcher in launchers:
            launcher.enabled = relaunch
        tag = "" if relaunch else "_no_relaunch"
        result[f"fa2_fwd_bwd_ms{tag}"] = do_bench(ours, return_mode="median")
        result[f"fa2_host_ms{tag}"] = host_ms(ours)
    result["sdpa_fwd_bwd_ms"] = do_bench(peer, return_mode="median")
    result["sdpa_host_ms"] = host_ms(peer)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=10)
    names = [f"{name}{suffix}" for suffix in COMPILE_MODES for name in VARIANTS]
    parser.add_argument("--variants", nargs="+", choices=names, default=names)
    parser.add_argument("--no-attention", action="store_true", help="skip the attention timing")
    parser.add_argument("--kv-heads", type=int, default=None, help="key/value heads (GQA)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        flag, value, floor = (
            ("--steps", args.steps, 1) if args.steps < 1 else ("--warmup", args.warmup, 0)
        )
        parser.error(f"{flag} must be >= {floor}, got {value}")
    if args.steps <= args.warmup:
        parser.error(f"--steps {args.steps} leaves no step after --warmup {args.warmup}")

    from flashprobe.errors import FlashprobeError
    from flashprobe.reporting.atomic import check_new_files, check_output_folder

    path = args.out / "throughput.json"
    try:
        for name in args.variants:
            variant_config(name, args.steps, args.batch, args.kv_heads)
    except FlashprobeError as exc:
        parser.error(f"--batch {args.batch} --kv-heads {args.kv_heads}: {exc}")
    try:
        check_output_folder(args.out, "--out")
        check_new_files([path], "remove it or choose another --out")
    except FlashprobeError as exc:
        parser.error(str(exc))

    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU; none is visible (torch.cuda.is_available() is False)")
    args.out.mkdir(parents=True, exist_ok=True)

    from flashprobe.environment import environment

    results: dict = {"environment": environment("cuda"), "kv_heads": args.kv_heads}
    if not args.no_attention:
        results["attention_only"] = attention_only(args.batch)
        print(json.dumps(results["attention_only"]))
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for name in args.variants:
            runs.append(
                run_variant(name, args.steps, args.batch, args.warmup, Path(tmp), args.kv_heads)
            )
            print(json.dumps(runs[-1]), flush=True)
    rates = {run["variant"]: run["median_tokens_per_s"] for run in runs}
    for run in runs:
        peer = "sdpa" + split_name(run["variant"])[1]
        run["ratio_to_sdpa"] = run["median_tokens_per_s"] / rates[peer] if peer in rates else None
        ratio = "" if run["ratio_to_sdpa"] is None else f"{run['ratio_to_sdpa']:.3f}× sdpa"
        print(f"{run['variant']:<28} {run['median_tokens_per_s']:>10.0f} tok/s  {ratio}  "
              f"loss {run['final_loss']:.3f}")  # fmt: skip
    results["runs"] = runs
    path.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
