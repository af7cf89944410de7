"""Forward launch configs timed against the tuned ones, round-robin in one process (CUDA).

    python tools/probe_configs.py --out DIR [--head-dims 64] [--seqs 1024 4096 16384]
        --config stats-r128=fa2+stats:128,8,3,128 --config sfa-4st=sfa:128,8,4

Each --config is NAME=PRESET[+stats]:BLOCK_M,WARPS,STAGES[,MAX_REGISTERS]. Every shape also
times `fa2`, `sfa` and `fa2+stats` with their tuned configs; ratios are printed against the
tuned `fa2`. Shapes as `flashprobe bench`: bf16, 16 heads, batch × seq = 32k tokens, causal
and not. Writes DIR/probe_configs.json (TFLOP/s of the median round, every round's ms).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_config(text: str) -> tuple[str, str, bool, tuple[int, ...]]:
    name, _, rest = text.partition("=")
    preset, _, numbers = rest.partition(":")
    instrument = preset.endswith("+stats")
    return name, preset.removesuffix("+stats"), instrument, tuple(map(int, numbers.split(",")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64])
    parser.add_argument("--seqs", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--config", action="append", default=[], type=parse_config)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    from flashprobe.environment import environment
    from flashprobe.kernels import autotune, tuning
    from flashprobe.probes import benchmark as bench
    from flashprobe.spec import make_spec

    variants = {"fa2": ("fa2", False, None), "sfa": ("sfa", False, None),
                "fa2+stats": ("fa2", True, None)}  # fmt: skip
    for name, preset, instrument, numbers in args.config:
        block_m, warps, stages, *cap = numbers
        config = tuning.FwdConfig(block_m, 64, warps, stages, max_registers=(cap or [None])[0])
        variants[name] = (preset, instrument, config)
    rows = []
    for head_dim in args.head_dims:
        for causal in (True, False):
            for seq in args.seqs:
                shape = bench.BenchShape(32768 // seq, 16, seq, head_dim, causal)
                q, k, v, _ = bench.make_inputs(shape)
                fns = {
                    name: autotune.forward_fn(causal, make_spec(p), q, k, v, instrument=i, config=c)
                    for name, (p, i, c) in variants.items()
                }
                ms: dict[str, list[float]] = {name: [] for name in fns}
                for _ in range(args.repeats):
                    for name, fn in fns.items():
                        ms[name].append(autotune.time_ms(fn))
                median = {name: sorted(t)[len(t) // 2] for name, t in ms.items()}
                tflops = {name: shape.flops("fwd") / m / 1e9 for name, m in median.items()}
                rows.append({"head_dim": head_dim, "causal": causal, "seq": seq,
                             "tflops": tflops, "ms": ms})  # fmt: skip
                ratios = " ".join(f"{n} {median['fa2'] / m:.3f}" for n, m in median.items())
                print(f"d {head_dim} {'causal' if causal else 'full'} N {seq}: {ratios}",
                      flush=True)  # fmt: skip
    payload = {"environment": environment("cuda"), "configs": args.config, "rows": rows}
    (args.out / "probe_configs.json").write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    main()
