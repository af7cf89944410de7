"""The forward kernel's hot loop in SASS, compiled for an sm_90 GPU on any machine (no GPU needed).

    python tools/sass_loop.py [--presets fa2 sfa] [--stats] [--head-dim 64] [--block-m 128]
                                [--warps 8] [--stages 4] [--causal] [--dump DIR]

Compiles `attn_fwd_kernel` with each preset's switches (`launch.forward_switches`, the same
constexprs a launch passes) and one-pass 64-key tiles for sm_90a (`flashprobe.kernels.sass`)
and prints, per variant: the instruction count of the first loop (the unmasked key tiles: one
iteration per tile) and its most frequent opcodes. This is how
docs/kernel-performance.md counts the softmax's cost per tile; the numbers depend on the Triton
version (the H200 machine has 3.6). Must run without TRITON_INTERPRET (it compiles).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["fa2", "sfa"])
    parser.add_argument("--stats", action="store_true", help="also the first preset instrumented")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--block-m", type=int, default=128)
    parser.add_argument("--warps", type=int, default=8)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dump", type=Path, help="write each variant's SASS here")
    args = parser.parse_args()

    import triton

    from flashprobe.kernels.launch import forward_switches
    from flashprobe.kernels.sass import first_loop, forward_sass
    from flashprobe.spec import make_spec

    variants = [(name, False) for name in args.presets]
    if args.stats:
        variants.append((args.presets[0], True))
    mask = "causal" if args.causal else "full"
    print(f"triton {triton.__version__}, sm_90a, d {args.head_dim}, {args.block_m}x64 tiles, "
          f"{args.warps} warps, {args.stages} stages, {mask}")  # fmt: skip
    for name, instrument in variants:
        spec = make_spec(name)
        if spec.block_n != 64:
            raise SystemExit(f"{name}: only 64-key one-pass tiles here (block_n {spec.block_n})")
        constexprs = {"HEAD_DIM": args.head_dim, "BLOCK_M": args.block_m, "BLOCK_N": 64,
                      "TWO_PASS": False, "CAUSAL": args.causal, "INTERPRET": False,
                      **forward_switches(spec, instrument=instrument,
                                         keep_o_fp32=spec.delta_source == "o_fp32")}  # fmt: skip
        sass = forward_sass(constexprs, args.warps, args.stages)
        label = name + ("+stats" if instrument else "")
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{label}.sass").write_text(sass)
        loop = first_loop(sass)
        top = collections.Counter(loop).most_common(8)
        print(f"{label:10s} hot loop {len(loop):4d} instructions: "
              + ", ".join(f"{op} {n}" for op, n in top))  # fmt: skip


if __name__ == "__main__":
    main()
