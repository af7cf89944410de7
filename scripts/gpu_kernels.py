"""One device call for the Triton kernels: GPU tests, optional tuning, and the speed grid.

    PYTHONUNBUFFERED=1 python scripts/gpu_kernels.py --out $OUT [--no-tests] [--tune]
        [--tune-seq 4096] [--tune-forward fa2 sfa fa2+stats] [--no-grid] [--atomic-dq]
        [--tune-atomic-only]

1. `pytest -m gpu tests` (every gpu-marked test; subprocess, xdist) → OUT/gpu_tests.log;
2. meanwhile, every kernel variant to be timed is compiled once in parallel worker processes
   (Triton's disk cache then serves the timing process);
3. with --tune: the forward launch configs of fa2, sfa and fa2 with stats, and fa2's backward
   ones, per (head_dim, causal) on one shape (N = --tune-seq, 32k tokens) → OUT/<arch>.json,
   also written to flashprobe/kernels/tuned/ here, and every candidate's time →
   OUT/tune_log.json; on Hopper (sm_90) every candidate is timed with pointer loads and with
   tensor-descriptor (TMA) loads (`tuning.FwdConfig.tma`; `scripts/tma_gain.py` compares the
   two per key from the log); --tune-forward narrows the forward variants tuned (the others
   keep their entries);
4. unless --no-grid: `flashprobe bench`'s grid (fa2, sfa, fa2 with stats against SDPA flash
   and cuDNN, and FlashAttention-2 and -3 where installed) → OUT/bench.json and the table on
   stdout.

--atomic-dq adds the backward that sums dQ with atomics (launch option dq_accumulation): fa2's
tuned too (`bwd|...|dot16-atomic` keys), and every preset timed both ways in the grid.
--tune-atomic-only tunes that backward alone (implies --tune --atomic-dq; the other tuned
configs are kept as they are): a few device minutes instead of the whole tuning.

Without a CUDA GPU, with an --out that is a file, or with result files of this call already in
--out, it stops before creating anything: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashprobe.errors import OneLineParser  # noqa: E402 (after the path)

HEAD_DIMS = (64, 128)


def _compile_task(task: tuple) -> str:
    """Run one variant once on a small input so its kernels are compiled and cached."""
    import torch

    from flashprobe.kernels import autotune, tuning
    from flashprobe.probes import benchmark as bench
    from flashprobe.spec import make_spec

    kind, spec_name, head_dim, causal, config, instrument = task
    shape = bench.BenchShape(1, 16, 1024, head_dim, causal)
    q, k, v, do = bench.make_inputs(shape)
    try:
        if kind == "tune-fwd":
            cfg = tuning.FwdConfig(**config)
            autotune.forward_fn(causal, make_spec(spec_name), q, k, v, config=cfg)()
        elif kind in ("tune-bwd", "tune-bwd-atomic"):
            cfg = tuning.BwdConfig(**config)
            how = "atomic" if kind == "tune-bwd-atomic" else "ordered"
            autotune.backward_fn(causal, make_spec(spec_name), q, k, v, do, config=cfg,
                                 dq_accumulation=how)()  # fmt: skip
        else:
            how = "atomic" if kind == "impl-atomic" else "ordered"
            impl = bench.Implementation(spec_name, make_spec(spec_name), instrument,
                                        dq_accumulation=how)  # fmt: skip
            bench.step_fn(bench.attend_fn(impl, shape), q, k, v, do, "fwd+bwd")()
        torch.cuda.synchronize()
    except Exception as exc:
        return f"FAIL {task}: {str(exc).splitlines()[0][:120]}"
    return "ok"


#: Forward variants tuned on their own: (preset, instrumented).
FWD_TUNED = (("fa2", False), ("sfa", False), ("fa2", True))


def _label(preset: str, instrumented: bool) -> str:
    return preset + ("+stats" if instrumented else "")


def tune(
    out: Path,
    workers: int,
    seq: int,
    atomic_dq: bool = False,
    atomic_only: bool = False,
    fwd_tuned: tuple[tuple[str, bool], ...] = FWD_TUNED,
) -> None:
    import torch

    from flashprobe.kernels import autotune, launch, tuning
    from flashprobe.probes import benchmark as bench
    from flashprobe.spec import make_spec

    configs = [(d, c) for d in HEAD_DIMS for c in (True, False)]
    fwd_tuned = () if atomic_only else fwd_tuned
    arch = tuning.arch_name(torch.device("cuda"))
    tma = int(arch[2:]) >= 90  # each candidate also with tensor-descriptor (TMA) loads
    tasks = [("tune-fwd", p, d, c, tuning.config_dict(cfg), inst)
             for p, inst in fwd_tuned for d, c in configs
             for cfg in autotune.fwd_candidates(d, tma)]  # fmt: skip
    if not atomic_only:
        tasks += [("tune-bwd", "fa2", d, c, tuning.config_dict(cfg), False)
                  for d, c in configs for cfg in autotune.bwd_candidates(d, tma=tma)]  # fmt: skip
    if atomic_dq or atomic_only:
        tasks += [("tune-bwd-atomic", "fa2", d, c, tuning.config_dict(cfg), False)
                  for d, c in configs
                  for cfg in autotune.bwd_candidates(d, atomic_dq=True, tma=tma)]  # fmt: skip
    autotune.compile_in_parallel(_compile_task, tasks, workers)
    tuned: dict[str, dict[str, int]] = {}
    log: dict[str, list] = {}
    known = tuning.load_tuned(arch)

    def record(key: str, timings: list) -> None:
        """The winner at this length; at another length than tuning.TUNED_SEQ, the TUNED_SEQ
        entry stays unless the winner beats it by autotune.SEQ_MARGIN."""
        config_type, at_seq = type(timings[0][0]), tuning.seq_key(key, seq)
        incumbent = config_type(**known[key]) if at_seq != key and key in known else None
        tuned[at_seq] = tuning.config_dict(autotune.pick(timings, incumbent))
        log[at_seq] = [[tuning.config_dict(g), ms] for g, ms in timings]
        print(f"tuned {at_seq}: {tuned[at_seq]}")

    for d, c in configs:
        inputs = bench.make_inputs(bench.BenchShape(32768 // seq, 16, seq, d, c))
        for preset, instrument in fwd_tuned:
            spec = make_spec(preset)
            variant = launch.forward_variant(spec, two_pass=False, instrument=instrument)
            candidates = autotune.fwd_candidates(d, tma)
            fwd = autotune.tune_forward(inputs, c, spec, candidates, instrument=instrument)
            record(tuning.fwd_key(d, c, 64, "bf16", variant), fwd)
        if not atomic_only:
            candidates = autotune.bwd_candidates(d, tma=tma)
            bwd = autotune.tune_backward(inputs, c, make_spec("fa2"), candidates)
            record(tuning.bwd_key(d, c, "bf16", "dot16"), bwd)
        if atomic_dq or atomic_only:
            candidates = autotune.bwd_candidates(d, atomic_dq=True, tma=tma)
            bwd = autotune.tune_backward(inputs, c, make_spec("fa2"), candidates, "atomic")
            record(tuning.bwd_key(d, c, "bf16", "dot16-atomic"), bwd)
    path = tuning.TUNED_DIR / f"{arch}.json"
    merged = {**known, **tuned}
    path.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    (out / f"{arch}.json").write_text(path.read_text())
    from flashprobe.environment import environment

    payload = {"environment": environment("cuda"), "seq": seq, "timings": log}
    (out / "tune_log.json").write_text(json.dumps(payload))
    tuning.clear_cache()


def result_files(args: argparse.Namespace, arch: str | None = None) -> list[Path]:
    """The files this call writes into --out (the tuned <arch>.json once the GPU is known)."""
    names = [] if args.no_tests else ["gpu_tests.log"]
    if args.tune:
        names += ["tune_log.json"] + ([f"{arch}.json"] if arch else [])
    names += [] if args.no_grid else ["bench.json"]
    return [args.out / name for name in names]


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--tune-seq", type=int, help="default: tuning.TUNED_SEQ; 32k tokens")
    parser.add_argument("--no-grid", action="store_true")
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--seqs", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--presets", nargs="+", default=["fa2", "sfa"])
    parser.add_argument("--repeats", type=int, default=3, help="round-robin rounds per shape")
    parser.add_argument("--atomic-dq", action="store_true", help="also the atomic-dQ backward")
    parser.add_argument(
        "--tune-atomic-only", action="store_true", help="tune only the atomic-dQ backward"
    )
    parser.add_argument(
        "--tune-forward", nargs="+", choices=[_label(*v) for v in FWD_TUNED],
        default=[_label(*v) for v in FWD_TUNED], help="the forward variants to tune",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.tune_atomic_only:
        args.tune = args.atomic_dq = True
    counts = {"--workers": [args.workers], "--repeats": [args.repeats], "--seqs": args.seqs,
              "--tune-seq": [] if args.tune_seq is None else [args.tune_seq]}  # fmt: skip
    for flag, values in counts.items():
        if values and min(values) < 1:
            parser.error(f"{flag} must be >= 1, got {min(values)}")

    from flashprobe.errors import FlashprobeError
    from flashprobe.reporting.atomic import check_new_files, check_output_folder

    replace = "remove it or choose another --out"
    try:
        check_output_folder(args.out, "--out")
        check_new_files(result_files(args), replace)
    except FlashprobeError as exc:
        parser.error(str(exc))

    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU; none is visible (torch.cuda.is_available() is False)")
    if args.tune:
        from flashprobe.kernels import tuning

        arch = tuning.arch_name(torch.device("cuda"))
        try:
            check_new_files(result_files(args, arch), replace)
        except FlashprobeError as exc:
            parser.error(str(exc))
    args.out.mkdir(parents=True, exist_ok=True)

    import triton

    from flashprobe.environment import environment
    from flashprobe.kernels import autotune
    from flashprobe.probes import benchmark as bench
    from flashprobe.reporting.bench_table import bench_tables

    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}")
    tests = None
    if not args.no_tests:
        log = open(args.out / "gpu_tests.log", "w")
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "tests", "-q", "-n", "6",
               "-p", "no:cacheprovider", "-rfE"]  # fmt: skip
        tests = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    if args.tune:
        from flashprobe.kernels.tuning import TUNED_SEQ

        seq = args.tune_seq or TUNED_SEQ
        fwd_tuned = tuple(v for v in FWD_TUNED if _label(*v) in args.tune_forward)
        tune(args.out, args.workers, seq, args.atomic_dq, args.tune_atomic_only, fwd_tuned)
    variants = [("impl", p, False) for p in args.presets] + [("impl", args.presets[0], True)]
    if args.atomic_dq:
        variants += [("impl-atomic", p, False) for p in args.presets]
    tasks = [
        (kind, p, d, c, None, inst)
        for d in HEAD_DIMS
        for c in (True, False)
        for kind, p, inst in variants
    ]
    if not args.no_grid:
        autotune.compile_in_parallel(_compile_task, tasks, args.workers)

    if tests is not None:
        code = tests.wait(timeout=400)
        tail = (args.out / "gpu_tests.log").read_text().strip().splitlines()[-1:]
        print(f"gpu tests exit {code}: {tail}")

    if args.no_grid:
        return 0
    shapes = bench.default_shapes(seqs=args.seqs, head_dims=HEAD_DIMS)
    dq = "both" if args.atomic_dq else "ordered"
    impls = bench.implementations(args.presets, instrumented=True, peers=True, dq=dq)
    timings = bench.run_benchmark(shapes, impls, bench.MODES, repeats=args.repeats)
    payload = {
        "environment": environment("cuda"),
        "peers": bench.peer_versions(impls),
        "timings": [t.to_dict() for t in timings],
    }
    (args.out / "bench.json").write_text(json.dumps(payload, indent=1))
    print(bench_tables(timings, impls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
