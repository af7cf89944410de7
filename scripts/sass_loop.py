"""The forward kernel's hot loop in SASS, compiled for an sm_90 GPU on any machine (no GPU needed).

    python scripts/sass_loop.py [--presets fa2 sfa] [--stats] [--head-dim 64] [--block-m 128]
                                [--warps 8] [--stages 4] [--causal] [--dump DIR]

Compiles `attn_fwd_kernel` with each preset's switches (`launch.forward_switches`, the same
constexprs a launch passes), one-pass 64-key tiles and the launch-time specialisation of
pointers and strides (16-aligned), through Triton's own ptxas for sm_90a, disassembles it with
the bundled nvdisasm and prints, per variant: the instruction count of the first loop (the
unmasked key tiles: one iteration per tile) and its most frequent opcodes. This is how
bench/KERNELS_H200.md counts the softmax's cost per tile; the numbers depend on the Triton
version (the H200 machine has 3.6). Must run without TRITON_INTERPRET (it compiles).
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_POINTERS = {
    **dict.fromkeys(("Q", "K", "V", "Out"), "*bf16"),
    **dict.fromkeys(("O32", "LSE", "ROW_MAX"), "*fp32"),
    **dict.fromkeys(("TIE_EVENTS", "P_ONES"), "*i32"),
}
_INTS = {"H", "M", "N", "tile_n"}
_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", re.M)


def compile_sass(constexprs: dict, num_warps: int, num_stages: int) -> str:
    """SASS text of the forward kernel for sm_90a with these constexprs."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    from flashprobe.kernels.forward import attn_fwd_kernel

    if not hasattr(attn_fwd_kernel, "arg_names"):
        raise SystemExit("sass_loop.py compiles kernels: unset TRITON_INTERPRET")
    target = GPUTarget("cuda", 90, 32)
    names = attn_fwd_kernel.arg_names
    signature = {}
    for name in names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in _POINTERS:
            signature[name] = _POINTERS[name]
        elif name.startswith("stride") or name in _INTS:
            signature[name] = "i32"
        else:
            signature[name] = "fp32"
    # What a launch with 16-aligned pointers and strides specialises on ("D": divisible by 16).
    divisible = make_backend(target).parse_attr("D")
    attrs = {(i,): divisible for i, n in enumerate(names) if signature[n][0] in "*i"}
    source = ASTSource(fn=attn_fwd_kernel, signature=signature, constexprs=constexprs,
                       attrs=attrs)  # fmt: skip
    options = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": False}
    kernel = triton.compile(source, target=target, options=options)
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        return subprocess.run([str(nvdisasm), "-c", str(cubin)], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip


def first_loop(sass: str) -> list[str]:
    """Opcodes of the first backward-branching loop (label .L_x_N ... BRA `(.L_x_N))."""
    lines = sass.splitlines()
    for end, line in enumerate(lines):
        branch = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if not branch:
            continue
        label = branch.group(1) + ":"
        starts = [i for i in range(end) if lines[i].strip().startswith(label)]
        if starts:
            return _INSTRUCTION.findall("\n".join(lines[starts[0] : end + 1]))
    return []


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
        sass = compile_sass(constexprs, args.warps, args.stages)
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
