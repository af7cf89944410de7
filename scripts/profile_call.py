"""Where the host time of one attention call (forward + backward) goes, on a CUDA machine.

    python scripts/profile_call.py [--calls 200] [--spec fa2] [--stats]

Queues a long GPU sleep first, so the host never waits for the GPU, then runs cProfile over
`--calls` calls of flashprobe.attention at GPT-2's shape (B 16, H 12, N 1024, d 64) and prints
the functions with the most own time, per call.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=60)  # ~8 launches each: under the queue depth
    parser.add_argument("--spec", default="fa2")
    parser.add_argument("--stats", action="store_true", help="return_stats=True")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    import torch

    import flashprobe
    from flashprobe.kernels import launch

    shape = (16, 12, 1024, 64)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.requires_grad_() for t in (q, k, v)]

    def call() -> None:
        out = flashprobe.attention(*leaves, causal=True, spec=args.spec, backend="triton",
                                   return_stats=args.stats)  # fmt: skip
        (out[0] if args.stats else out).backward(do)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # ~1 s of queued GPU work: the host never waits
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        call()
    profile.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profile)
    total = stats.total_tt  # type: ignore[attr-defined]
    print(f"host per call: {1e6 * total / args.calls:.0f} µs (under cProfile)")
    launchers = (launch._FORWARD, launch._PREPROCESS, launch._BACKWARD)
    print("relaunch cache sizes:", [len(x.compiled) for x in launchers])
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    for (file, line, name), (_cc, ncalls, own, cum, _callers) in rows[: args.top]:
        print(f"{1e6 * own / args.calls:8.1f} µs own {1e6 * cum / args.calls:8.1f} µs cum "
              f"{ncalls / args.calls:5.1f}× {name} ({Path(file).name}:{line})")  # fmt: skip


if __name__ == "__main__":
    main()
