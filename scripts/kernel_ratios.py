"""The kernel-performance table of docs/kernel-performance.md, from a `flashprobe bench --json`
(or scripts/gpu_kernels.py) file: each ratio's range over the grid's shapes.

    python scripts/kernel_ratios.py docs/results/kernels-h200-grid.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: (label, numerator implementation, denominator implementation, mode, target)
RATIOS = (
    ("`fa2` forward ÷ SDPA flash", "fa2", "sdpa-flash", "fwd", "≥ 1.0×"),
    ("`fa2` backward ÷ SDPA flash", "fa2", "sdpa-flash", "bwd", "≥ 0.9×"),
    ("`fa2` forward ÷ SDPA cuDNN", "fa2", "sdpa-cudnn", "fwd", "stretch goal"),
    ("`fa2` backward ÷ SDPA cuDNN", "fa2", "sdpa-cudnn", "bwd", "stretch goal"),
    ("`fa2` forward ÷ FlashAttention-2", "fa2", "flash-attn-2", "fwd", "—"),
    ("`fa2` backward ÷ FlashAttention-2", "fa2", "flash-attn-2", "bwd", "—"),
    ("`fa2` forward + backward ÷ FlashAttention-2", "fa2", "flash-attn-2", "fwd+bwd", "—"),
    ("`fa2` forward ÷ FlashAttention-3", "fa2", "flash-attn-3", "fwd", "—"),
    ("`fa2` backward ÷ FlashAttention-3", "fa2", "flash-attn-3", "bwd", "—"),
    ("`fa2` forward + backward ÷ FlashAttention-3", "fa2", "flash-attn-3", "fwd+bwd", "—"),
    # `flashprobe bench --dq both`: the backward with atomic dQ (rows only where it was timed)
    ("`fa2+atomic-dq` backward ÷ SDPA flash", "fa2+atomic-dq", "sdpa-flash", "bwd", "—"),
    ("`fa2+atomic-dq` backward ÷ SDPA cuDNN", "fa2+atomic-dq", "sdpa-cudnn", "bwd", "≥ 0.95×"),
    ("`fa2+atomic-dq` fwd + bwd ÷ SDPA cuDNN", "fa2+atomic-dq", "sdpa-cudnn", "fwd+bwd", "—"),
    ("`fa2+atomic-dq` ÷ `fa2`, backward", "fa2+atomic-dq", "fa2", "bwd", "—"),
    ("`sfa` ÷ `fa2`, forward", "sfa", "fa2", "fwd", "within 3%"),
    ("`sfa` ÷ `fa2`, forward + backward", "sfa", "fa2", "fwd+bwd", "—"),
    ("instrumentation on ÷ off, forward", "fa2+stats", "fa2", "fwd", "within 10%"),
    ("instrumentation on ÷ off, forward + backward", "fa2+stats", "fa2", "fwd+bwd", "within 10%"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_json", type=Path)
    args = parser.parse_args()
    data = json.loads(args.bench_json.read_text())
    tflops = {}
    for t in data["timings"]:
        shape = (t["seq"], t["head_dim"], t["causal"])
        if t["tflops"] is not None:  # None: not installed or not supported there
            tflops[t["impl"], t["mode"], shape] = t["tflops"]
    shapes = sorted({s for (_, _, s) in tflops})
    env = data.get("environment", {})
    peers = ", ".join(f"{n} {v}" for n, v in data.get("peers", {}).items() if v)
    print(f"{env.get('gpu')}, torch {env.get('torch')}, triton {env.get('triton')}"
          + (f"; peers {peers}" if peers else "")
          + f"; {len(shapes)} shapes (N × d × mask)\n")  # fmt: skip
    print("| comparison | range over the shapes | target |")
    print("|---|---|---|")
    for label, top, bottom, mode, target in RATIOS:
        ratios = [tflops[top, mode, s] / tflops[bottom, mode, s] for s in shapes
                  if (top, mode, s) in tflops and (bottom, mode, s) in tflops]  # fmt: skip
        if not ratios:
            continue
        text = f"{min(ratios):.2f}–{max(ratios):.2f}×"
        if bottom == "sdpa-flash" and top == "fa2":
            own = [tflops[top, mode, s] for s in shapes if (top, mode, s) in tflops]
            text += f" ({min(own):.0f}–{max(own):.0f} TFLOP/s)"
        print(f"| {label} | {text} | {target} |")


if __name__ == "__main__":
    main()
