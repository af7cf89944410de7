"""One device call for the Triton kernels: GPU tests, tuning, and the speed table.

    PYTHONUNBUFFERED=1 python scripts/gpu_kernels.py --out $OUT [--no-tests] [--no-tune]

1. `pytest -m gpu tests/kernels` (in a subprocess, xdist workers) → OUT/gpu_tests.log;
2. meanwhile, every kernel variant to be timed is compiled once in parallel worker processes
   (Triton's disk cache then serves the timing process);
3. tuning of the fa2 forward and backward launch configs per (head_dim, causal) on one shape
   → OUT/<arch>.json, also written to flashprobe/kernels/tuned/ here so the benchmark uses it;
4. the speed grid: fa2, sfa, fa2 with stats against SDPA flash and cuDNN → OUT/bench.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEQS = (1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
TOKENS, HEADS = 32768, 16
TUNE_SEQ = 4096


def _compile_task(task: tuple) -> str:
    """Run one kernel variant once on a small input (same specialisation as the benchmark)."""
    import torch

    from flashprobe.kernels import bench, tuning
    from flashprobe.spec import make_spec

    kind, spec_name, head_dim, causal, config, instrument = task
    shape = bench.Shape(1, HEADS, 1024, head_dim, causal)
    spec = make_spec(spec_name)
    q, k, v, do = shape.inputs()
    try:
        if kind == "fwd":
            cfg = tuning.FwdConfig(**config) if config else None
            bench.forward_fn(shape, spec, q, k, v, instrument=instrument, config=cfg)()
        else:
            cfg = tuning.BwdConfig(**config) if config else None
            bench.backward_fn(shape, spec, q, k, v, do, config=cfg)()
        torch.cuda.synchronize()
    except Exception as exc:
        return f"FAIL {task}: {str(exc).splitlines()[0][:120]}"
    return "ok"


def precompile(tasks: list[tuple], workers: int) -> None:
    start = time.time()
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        results = list(pool.map(_compile_task, tasks))
    failed = [r for r in results if r != "ok"]
    print(f"precompiled {len(tasks)} variants in {time.time() - start:.0f}s; {len(failed)} failed")
    for line in failed[:10]:
        print("  " + line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--no-tune", action="store_true")
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--seqs", type=int, nargs="+", default=list(SEQS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import torch
    import triton

    from flashprobe.kernels import bench, tuning

    arch = tuning.arch_name(torch.device("cuda"))
    versions = f"torch {torch.__version__} triton {triton.__version__}"
    print(f"{torch.cuda.get_device_name()} {arch} {versions}")

    tests = None
    if not args.no_tests:
        log = open(args.out / "gpu_tests.log", "w")
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/kernels", "-q", "-n", "6",
               "-p", "no:cacheprovider", "-rfE"]  # fmt: skip
        tests = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    configs = [(d, c) for d in HEAD_DIMS for c in (True, False)]
    if not args.no_tune:
        tasks = [("fwd", "fa2", d, c, tuning.config_dict(cfg), False)
                 for d, c in configs for cfg in bench.fwd_candidates(d)]  # fmt: skip
        tasks += [("bwd", "fa2", d, c, tuning.config_dict(cfg), False)
                  for d, c in configs for cfg in bench.bwd_candidates(d)]  # fmt: skip
        precompile(tasks, args.workers)

    if tests is not None:
        code = tests.wait(timeout=400)
        tail = (args.out / "gpu_tests.log").read_text().strip().splitlines()[-1:]
        print(f"gpu tests exit {code}: {tail}")

    tuned: dict[str, dict[str, int]] = {}
    tune_log: dict[str, list] = {}
    if not args.no_tune:
        for d, c in configs:
            shape = bench.Shape(TOKENS // TUNE_SEQ, HEADS, TUNE_SEQ, d, c)
            spec = bench.make_spec("fa2")
            fwd = bench.tune_forward(shape, spec, bench.fwd_candidates(d))
            bwd = bench.tune_backward(shape, spec, bench.bwd_candidates(d))
            for block_n in (64,):
                key = tuning.fwd_key(d, c, block_n, "bf16", "onepass")
                tuned[key] = tuning.config_dict(fwd[0][0])
            tuned[tuning.bwd_key(d, c, "bf16", "dot16")] = tuning.config_dict(bwd[0][0])
            tune_log[f"d{d} causal={c}"] = [[tuning.config_dict(cfg), ms] for cfg, ms in fwd + bwd]
            print(f"tuned d{d} causal={c}: fwd {fwd[0]} bwd {bwd[0]}")
        tuning.TUNED_DIR.mkdir(exist_ok=True)
        path = tuning.TUNED_DIR / f"{arch}.json"
        merged = {**tuning.load_tuned(arch), **tuned}
        path.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
        (args.out / f"{arch}.json").write_text(path.read_text())
        (args.out / "tune_log.json").write_text(json.dumps(tune_log))
        tuning.load_tuned.cache_clear()

    # Compile the timed variants (tuned configs now on disk) before timing anything.
    tasks = [(kind, spec, d, c, None, inst) for d, c in configs
             for kind, spec, inst in (("fwd", "fa2", False), ("fwd", "sfa", False),
                                      ("fwd", "fa2", True), ("bwd", "fa2", False),
                                      ("bwd", "sfa", False), ("fwd", "paper-code", False),
                                      ("bwd", "paper-code", False))]  # fmt: skip
    precompile(tasks, args.workers)

    rows = []
    impls = [
        ("fa2", "triton", "fa2"),
        ("sfa", "triton", "sfa"),
        ("fa2+stats", "triton+stats", "fa2"),
        ("sdpa-flash", "sdpa-flash", None),
        ("sdpa-cudnn", "sdpa-cudnn", None),
        ("paper-code", "triton", "paper-code"),
    ]
    for d in HEAD_DIMS:
        for c in (True, False):
            for seq in args.seqs:
                shape = bench.Shape(TOKENS // seq, HEADS, seq, d, c)
                for mode in ("fwd", "bwd"):
                    row = {"d": d, "causal": c, "seq": seq, "mode": mode}
                    for name, impl, spec in impls:
                        if name == "fa2+stats" and mode == "bwd":
                            continue
                        if name == "paper-code" and seq != TUNE_SEQ:
                            continue
                        try:
                            _, tflops = bench.benchmark(shape, impl, mode, spec)
                        except Exception as exc:
                            print(f"  {name} {shape} {mode}: {str(exc).splitlines()[0][:100]}")
                            tflops = float("nan")
                        row[name] = round(tflops, 1)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                torch.cuda.empty_cache()
    (args.out / "bench.json").write_text(json.dumps(rows, indent=1))
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    print("\nTFLOP/s (ratio to sdpa-flash)")
    print(
        "d   mask   seq   mode  fa2          sfa    stats  flash  cudnn  fa2/flash sfa/fa2 st/fa2"
    )
    for r in rows:
        mask = "caus" if r["causal"] else "full"
        flash = r["sdpa-flash"]
        st = r.get("fa2+stats", float("nan"))
        print(f"{r['d']:<4}{mask:<7}{r['seq']:<6}{r['mode']:<6}{r['fa2']:<13}{r['sfa']:<7}"
              f"{st:<7}{flash:<7}{r['sdpa-cudnn']:<7}{r['fa2'] / flash:<10.2f}"
              f"{r['sfa'] / r['fa2']:<8.3f}{st / r['fa2']:.3f}")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("TRITON_PRINT_AUTOTUNING", "0")
    main()
