"""Training tokens/s of GPT-2 124M under DDP on 1, 2, 4 and 8 GPUs (those that are visible).

    PYTHONUNBUFFERED=1 python scripts/ddp_scaling.py --out $OUT [--steps 25] [--warmup 5]
        [--world-sizes 1 2 4 8] [--specs paper-code fa2] [--batch 512] [--micro-batch 32]

For each kernel spec and world size N launches `torchrun --standalone --nproc_per_node N` on
this script's worker: a `train_run` at the shape of ablations/gpt2-pysource.yaml (12 layers,
12 heads, 768 wide, seq 1024, no bias, byte vocabulary 256, flashprobe's Triton kernels, bf16
autocast, TF32 off, AdamW, eager) with the paper's global batch (512 sequences = 524,288 tokens
a step; 32 per GPU and forward, gradient accumulation for the rest), on the in-memory stdlib
byte corpus (the tokens do not change the speed). tokens/s is the median over the steps after
`--warmup` of rank 0's per-step figure (the global batch's tokens over the step's wall time:
forward, backward, all-reduce, clip, update). Writes OUT/ddp_scaling.json after every run (a
cut-off call keeps what was measured): per spec and world size the tokens/s, step time,
accumulation and peak memory; the scaling efficiency tokens/s(N) / (N · tokens/s(1)); the
environment (torch, triton, GPU, driver, git SHA, `nvidia-smi topo -m`).

NVLink multicast stays off: every launched process gets flashprobe.train.distributed's
MULTICAST_OFF variables. `--device cpu` runs the same plumbing on a tiny model over gloo (a
check on a machine without GPUs; its figures mean nothing).

Bad input (a step count below 1, no GPU for --device cuda, an OUT/ddp_scaling.json that exists)
is one line on stderr and exit code 2, before anything runs; a run that fails or times out is
recorded with its output's tail and makes the script exit with code 1 once the others ran.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashprobe.errors import OneLineParser  # noqa: E402 (after the path)

GPT2_BYTES = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "vocab_size": 256,
              "bias": False, "dropout": 0.0}  # fmt: skip
TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 256}


def train_config(args: argparse.Namespace) -> dict:
    cuda = args.device == "cuda"
    backend = "triton" if cuda else "emulator"
    return {
        "model": {**(GPT2_BYTES if cuda else TINY),
                  "attention": {"impl": "flashprobe", "spec": args.spec, "backend": backend}},
        "data": {"source": "stdlib", "max_bytes": None if cuda else 200_000},
        "optimizer": {"name": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.0},
        "schedule": {"warmup_steps": 2000, "decay_steps": 600_000, "min_lr": 1e-5},
        "train": {"steps": args.steps, "batch_size": args.batch,
                  "micro_batch_size": args.micro_batch, "precision": "bf16", "grad_clip": 1.0,
                  "allow_tf32": False, "device": args.device, "checkpoint_final": False},
        "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 0},
    }  # fmt: skip


def worker(args: argparse.Namespace) -> None:
    """One rank of one measurement (under torchrun); rank 0 writes args.result."""
    import torch

    from flashprobe.train import train_run
    from flashprobe.train.metrics import read_jsonl

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    with tempfile.TemporaryDirectory() as tmp:
        summary = train_run(train_config(args), Path(tmp) / "run")
        if int(os.environ.get("RANK", "0")) != 0:
            return
        rows = read_jsonl(Path(tmp) / "run" / "metrics.jsonl")
    rates = [row["tokens_per_s"] for row in rows][args.warmup :]
    if not rates:
        raise SystemExit(f"--steps {args.steps} leaves no step after --warmup {args.warmup}")
    tokens_per_step = args.batch * train_config(args)["model"]["block_size"]
    per_rank = args.batch // world_size
    result = {
        "world_size": world_size,
        "spec": args.spec,
        "batch_size": args.batch,
        "micro_batch_size": args.micro_batch,
        "accumulation": per_rank // args.micro_batch,
        "tokens_per_step": tokens_per_step,
        "median_tokens_per_s": statistics.median(rates),
        "median_step_s": tokens_per_step / statistics.median(rates),
        "steps_timed": len(rates),
        "final_loss": summary.final_loss,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30
        if torch.cuda.is_available() and args.device == "cuda"
        else None,
    }
    Path(args.result).write_text(json.dumps(result))


def launch(args: argparse.Namespace, spec: str, world_size: int, result: Path) -> dict:
    from flashprobe.train.distributed import MULTICAST_OFF

    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(world_size), str(Path(__file__).resolve()), "--worker",
        "--result", str(result), "--spec", spec, "--steps", str(args.steps),
        "--warmup", str(args.warmup), "--batch", str(args.batch),
        "--micro-batch", str(args.micro_batch), "--device", args.device,
    ]  # fmt: skip
    env = {
        **os.environ,
        **MULTICAST_OFF,  # NVLink multicast off on shared GPU hosts, whatever the caller set
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        # torchrun's default for N > 1: one thread per rank; the same for N = 1 keeps the host
        # side of every world size alike
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    start = time.perf_counter()
    log = result.with_suffix(".log")
    with log.open("w") as sink, subprocess.Popen(command, env=env, stdout=sink, stderr=sink) as run:
        try:
            code = run.wait(timeout=args.timeout)
            error = f"exit {code}" if code else None
        except subprocess.TimeoutExpired:
            run.terminate()  # torchrun stops its ranks (each in a session of its own) on SIGTERM
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
            error = f"timeout {args.timeout} s"
    if error is not None:
        return {"world_size": world_size, "spec": spec, "error": error,
                "output_tail": log.read_text(errors="replace")[-3000:]}  # fmt: skip
    out = json.loads(result.read_text())
    out["launch_wall_s"] = time.perf_counter() - start
    return out


def add_efficiency(runs: list[dict]) -> None:
    """efficiency = tokens/s(N) / (N · tokens/s(1)) of the same spec (None without N = 1)."""
    single = {r["spec"]: r["median_tokens_per_s"] for r in runs
              if r["world_size"] == 1 and "error" not in r}  # fmt: skip
    for run in runs:
        base = single.get(run["spec"])
        ok = "error" not in run and base
        run["speedup"] = run["median_tokens_per_s"] / base if ok else None
        run["efficiency"] = run["speedup"] / run["world_size"] if ok else None


def topology() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                             timeout=20, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, before anything runs, numbers no run can have and kernel specs that do not
    exist (one line, exit 2)."""
    from flashprobe.errors import FlashprobeError
    from flashprobe.spec import make_spec

    least = {"--steps": (args.steps, 1), "--warmup": (args.warmup, 0),
             "--batch": (args.batch, 1), "--micro-batch": (args.micro_batch, 1),
             "--timeout": (args.timeout, 1)}  # fmt: skip
    for flag, (value, floor) in least.items():
        if value is not None and value < floor:
            parser.error(f"{flag} must be >= {floor}, got {value}")
    if args.steps <= args.warmup:
        parser.error(f"--steps {args.steps} leaves no step after --warmup {args.warmup}")
    bad = [n for n in args.world_sizes if n < 1]
    if bad:
        parser.error(f"--world-sizes must be GPU counts >= 1, got {bad[0]}")
    for spec in args.specs if not args.worker else [args.spec]:
        try:
            make_spec(spec)
        except FlashprobeError as exc:
            parser.error(f"--specs {spec}: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the median")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--specs", nargs="+", default=["paper-code", "fa2"])
    parser.add_argument("--batch", type=int, default=None, help="sequences a step (512)")
    parser.add_argument("--micro-batch", type=int, default=None, help="per GPU and forward (32)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per torchrun launch")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_args(parser, args)
    cuda = args.device == "cuda"
    args.batch = args.batch or (512 if cuda else 8)
    args.micro_batch = args.micro_batch or (32 if cuda else 2)
    if args.worker:
        worker(args)
        return 0
    if args.out is None:
        parser.error("--out is required")

    import torch

    from flashprobe.environment import environment
    from flashprobe.errors import FlashprobeError
    from flashprobe.reporting.atomic import check_new_files, check_output_folder

    visible = torch.cuda.device_count() if cuda else (os.cpu_count() or 1)
    if cuda and visible == 0:
        parser.error("no CUDA GPU is visible (--device cpu checks the plumbing)")
    sizes = [
        n for n in args.world_sizes if n <= visible and args.batch % (n * args.micro_batch) == 0
    ]
    skipped = sorted(set(args.world_sizes) - set(sizes))
    if not sizes:
        parser.error(
            f"no world size of {' '.join(map(str, args.world_sizes))} can run: {visible} "
            f"{'GPUs' if cuda else 'CPUs'} here, and --batch {args.batch} must be a multiple of "
            f"N × --micro-batch {args.micro_batch}"
        )
    path = args.out / "ddp_scaling.json"
    try:
        check_output_folder(args.out, "--out")
        check_new_files([path], "remove it or choose another --out")
    except FlashprobeError as exc:
        parser.error(str(exc))
    document: dict = {
        "environment": environment(args.device, max(sizes, default=1)),
        "visible_gpus": visible if cuda else 0,
        "gpus": [torch.cuda.get_device_name(i) for i in range(visible)] if cuda else [],
        "topology": topology() if cuda else None,
        "multicast_off": True,
        "world_sizes": sizes,
        "skipped_world_sizes": skipped,
        "config": {k: v for k, v in train_config(args).items() if k != "metrics"},
        "steps": args.steps,
        "warmup": args.warmup,
        "runs": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.specs:
            for n in sizes:
                run = launch(args, spec, n, Path(tmp) / f"{spec}-{n}.json")
                document["runs"].append(run)
                add_efficiency(document["runs"])
                path.write_text(json.dumps(document, indent=1))
                rate = run.get("median_tokens_per_s")
                line = run["error"] if rate is None else f"{rate:,.0f} tokens/s"
                eff = run.get("efficiency")
                more = "" if eff is None else f", efficiency {eff:.2f}"
                print(f"{spec:<12} {n} GPU(s): {line}{more}", flush=True)
    print(f"-> {path}")
    failed = [r for r in document["runs"] if "error" in r]
    if failed:
        names = ", ".join(
            f"{r['spec']} on {r['world_size']} rank(s) ({r['error']})" for r in failed
        )
        print(f"ddp_scaling: {len(failed)} of {len(document['runs'])} runs failed: {names}; "
              f"their output_tail is in {path}", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
