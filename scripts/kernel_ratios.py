"""The kernel-performance table of docs/kernel-performance.md, from a `flashprobe bench --json`
(or scripts/gpu_kernels.py) file: each ratio's range over the grid's shapes.

    python scripts/kernel_ratios.py docs/results/kernels-h200-grid.json

A file it cannot read is one line on stderr and exit code 2.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError, OneLineParser
from flashprobe.json_io import read_json_file
from flashprobe.reporting.digest.schema import FORMAT as DIGEST_FORMAT

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


EXPECTED = "a `flashprobe bench --json` file: an object with a timings list"
#: Each timing's fields this table reads, and what they hold.
FIELDS = {"impl": str, "mode": str, "seq": int, "head_dim": int, "causal": bool}


def _timing_problem(timing: Any) -> str | None:
    if not isinstance(timing, dict):
        return "is not an object"
    for key, kind in FIELDS.items():
        value = timing.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"has no {key} ({kind.__name__})"
    tflops = timing.get("tflops")
    if tflops is not None and not (
        isinstance(tflops, int | float) and not isinstance(tflops, bool)
        and math.isfinite(tflops) and tflops > 0
    ):  # fmt: skip
        return f"has tflops {tflops!r}, not a positive number or null"
    return None


def read_bench(path: Path) -> dict:
    """The bench file's object; a FlashprobeError naming the file and what is wrong."""
    data = read_json_file(path, "bench file")
    if isinstance(data, dict) and data.get("format") == DIGEST_FORMAT:
        raise FlashprobeError(f"{path} is a flashprobe digest, not a bench file (expected "
                              f"{EXPECTED})")  # fmt: skip
    if not isinstance(data, dict) or not isinstance(data.get("timings"), list):
        raise FlashprobeError(f"{path} has no timings list (expected {EXPECTED})")
    if not data["timings"]:
        raise FlashprobeError(f"{path} holds no timings")
    for key in ("environment", "peers"):
        if not isinstance(data.get(key, {}), dict):
            raise FlashprobeError(f"{path}: {key} is not an object")
    for index, timing in enumerate(data["timings"]):
        problem = _timing_problem(timing)
        if problem:
            raise FlashprobeError(f"{path}: timings[{index}] {problem}")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    parser.add_argument("bench_json", type=Path)
    args = parser.parse_args(argv)
    try:
        data = read_bench(args.bench_json)
    except FlashprobeError as exc:
        parser.error(str(exc))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
