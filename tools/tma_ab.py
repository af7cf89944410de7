"""Pointer loads against tensor-descriptor (TMA) loads at `fa2`'s tuned configs, one process.

    PYTHONUNBUFFERED=1 python tools/tma_ab.py --out OUT [--seq 4096] [--rounds 3]
    python scripts/tma_gain.py OUT/tma_ab.json

A few device minutes where `scripts/gpu_kernels.py --tune` (which times every candidate both
ways) needs many: per shape (bf16, 16 heads, batch x seq = 32k tokens; d 128 and 64, full and
causal, in that order), `fa2`'s tuned forward and backward config as it is and with `tma=True`,
timed in alternation (`--rounds` rounds, each ms the median of triton's do_bench), beside SDPA
cuDNN's forward and backward as the peer. OUT/tma_ab.json is rewritten after every shape (a call
cut short keeps the shapes done) in the tune log's form, `{"environment", "seq", "timings":
{key: [[config, ms], ...]}}`, plus `"peers": {key: ms}`, so `scripts/tma_gain.py` prints
pointer / TMA per key. The table printed here adds `fa2` (its faster way) / cuDNN.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashprobe.errors import OneLineParser

SHAPES = ((128, False), (64, False), (128, True), (64, True))  # (head_dim, causal)
TOKENS, HEADS = 32768, 16


def alternate(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median ms per function over `rounds` rounds, the functions timed in turn each round
    (clock and thermal drift fall on all of them alike)."""
    from flashprobe.kernels.autotune import time_ms

    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(time_ms(fn))
    return {name: statistics.median(ms) for name, ms in samples.items()}


def main() -> None:
    parser = OneLineParser(prog="tma_ab.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.seq < 16 or TOKENS % args.seq or args.rounds < 1:
        parser.error(f"--seq must divide {TOKENS} (≥ 16) and --rounds be ≥ 1")
    result = args.out / "tma_ab.json"
    if result.exists():
        parser.error(f"{result} exists; give another --out")

    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU of compute capability ≥ 9 (TMA loads)")
    from flashprobe.environment import environment
    from flashprobe.kernels import autotune, launch, tuning
    from flashprobe.probes import benchmark as bench
    from flashprobe.spec import make_spec

    arch = tuning.arch_name(torch.device("cuda"))
    if int(arch[2:]) < 90:
        parser.error(f"needs compute capability ≥ 9 for TMA loads, this GPU is {arch}")
    args.out.mkdir(parents=True, exist_ok=True)
    spec, seq = make_spec("fa2"), args.seq
    payload: dict = {"environment": environment("cuda"), "seq": seq, "timings": {}, "peers": {}}
    cudnn = bench.Implementation("sdpa-cudnn", sdpa_backend="CUDNN_ATTENTION")
    variant = launch.forward_variant(spec, two_pass=False, instrument=False)
    rows = []
    for head_dim, causal in SHAPES:
        shape = bench.BenchShape(TOKENS // seq, HEADS, seq, head_dim, causal)
        q, k, v, do = bench.make_inputs(shape)
        fwd_key = tuning.fwd_key(head_dim, causal, spec.block_n, "bf16", variant)
        bwd_key = tuning.bwd_key(head_dim, causal, "bf16", "dot16")
        fwd = tuning.forward_config(arch, head_dim, causal, spec.block_n, "bf16", variant, seq)
        bwd = tuning.backward_config(arch, head_dim, causal, "bf16", "dot16", seq)
        configs = {
            "fwd": fwd, "fwd+tma": dataclasses.replace(fwd, tma=True),
            "bwd": bwd, "bwd+tma": dataclasses.replace(bwd, tma=True),
        }  # fmt: skip
        attend = bench.attend_fn(cudnn, shape)
        fns = {
            name: (autotune.forward_fn(causal, spec, q, k, v, config=config)
                   if name.startswith("fwd")
                   else autotune.backward_fn(causal, spec, q, k, v, do, config=config))
            for name, config in configs.items()
        }  # fmt: skip
        fns["cudnn fwd"] = bench.step_fn(attend, q, k, v, do, "fwd")
        fns["cudnn bwd"] = bench.step_fn(attend, q, k, v, do, "bwd")
        ms = alternate(fns, args.rounds)
        for key, way in ((fwd_key, "fwd"), (bwd_key, "bwd")):
            payload["timings"][tuning.seq_key(key, seq)] = [
                [tuning.config_dict(configs[name]), ms[name]] for name in (way, way + "+tma")
            ]
            payload["peers"][tuning.seq_key(key, seq)] = {"sdpa-cudnn": ms[f"cudnn {way}"]}
            best = min(ms[way], ms[way + "+tma"])
            rows.append([shape.label(), way, ms[way], ms[way + "+tma"],
                         ms[way] / ms[way + "+tma"], ms[f"cudnn {way}"] / best])  # fmt: skip
        result.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"{shape.label()}: " + ", ".join(f"{n} {t:.3f} ms" for n, t in ms.items()))

    from tabulate import tabulate

    print(tabulate(rows, headers=["shape", "pass", "pointer ms", "TMA ms", "pointer / TMA",
                                  "fa2 (faster) / cuDNN speed"], floatfmt=".3f"))  # fmt: skip


if __name__ == "__main__":
    main()
