"""A/B the backward: the tuned launch configs against ordered-dQ configs, one process.

    PYTHONUNBUFFERED=1 python scripts/ab_backward.py --out $OUT [--seqs 1024 4096 16384]

`BwdConfig.ordered_dq` lets the dK/dV programs add their shares of dQ in key-block order
instead of a second pass over the scores for dQ (7 matrix products per score tile → 5). Per
shape (bf16, 16 heads, batch × seq = 32k tokens, `fa2`), times `launch.attention_backward`
(δ preprocess + backward) with the tuned config and with each ordered candidate, round-robin,
and prints TFLOP/s (4·B·H·N²·D × 2.5, × 0.5 causal) and ratios to the tuned config. Writes
OUT/ab_backward.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CANDIDATES = {  # (block_m1, block_n1, num_warps, num_stages); block_m2/n2 are unused
    64: [(32, 64, 4, 3), (64, 64, 4, 2), (64, 128, 8, 2), (32, 128, 4, 3), (64, 128, 4, 2)],
    128: [(32, 64, 4, 3), (64, 64, 4, 2), (64, 128, 8, 2), (32, 128, 8, 2)],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seqs", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import torch
    from triton.testing import do_bench

    from flashprobe.environment import environment
    from flashprobe.experiments import benchmark as bench
    from flashprobe.kernels import launch, tuning
    from flashprobe.spec import make_spec

    spec = make_spec("fa2")
    rows = []
    for shape in bench.default_shapes(seqs=args.seqs):
        q, k, v, do = bench.make_inputs(shape)
        scale = shape.head_dim**-0.5
        fwd = launch.attention_forward(q, k, v, causal=shape.causal, spec=spec, scale=scale)
        tuned = tuning.backward_config(
            tuning.arch_name(q.device), shape.head_dim, shape.causal, "bf16", "dot16", shape.seq
        )
        configs = {"tuned": tuned, "tuned+ordered": dataclasses.replace(tuned, ordered_dq=True)}
        for bm, bn, warps, stages in CANDIDATES[shape.head_dim]:
            configs[f"ordered {bm}x{bn} w{warps} s{stages}"] = tuning.BwdConfig(
                bm, bn, bm, bn, num_warps=warps, num_stages=stages, ordered_dq=True
            )
        steps, times, failed = {}, {}, {}
        for name, config in configs.items():
            step = functools.partial(
                launch.attention_backward, q, k, v, fwd.o, fwd.lse, do,
                causal=shape.causal, spec=spec, scale=scale, config=config,
            )  # fmt: skip
            try:
                step()
                torch.cuda.synchronize()
                steps[name], times[name] = step, []
            except Exception as exc:  # a config that does not compile or fit
                failed[name] = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        for _ in range(args.rounds):
            for name, step in steps.items():
                times[name].append(do_bench(step, warmup=25, rep=100, return_mode="median"))
        base = statistics.median(times["tuned"])
        for name in configs:
            ms = statistics.median(times[name]) if name in times else None
            tflops = shape.flops("bwd") / ms * 1e-9 if ms else None
            ratio = base / ms if ms else None
            rows.append({"shape": shape.label(), "seq": shape.seq, "head_dim": shape.head_dim,
                         "causal": shape.causal, "config": name,
                         "spec": dataclasses.asdict(configs[name]), "ms": ms, "tflops": tflops,
                         "vs_tuned": ratio, "error": failed.get(name)})  # fmt: skip
            text = f"{tflops:6.1f} TFLOP/s {ratio:5.2f}×" if ms else f"failed: {failed[name]}"
            print(f"{shape.label():28s} {name:28s} {text}", flush=True)
        del q, k, v, do, fwd
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"environment": environment("cuda"), "rows": rows}
    (args.out / "ab_backward.json").write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
