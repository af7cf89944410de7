"""Where the host time of one attention call (forward + backward) goes, on a CUDA machine.

    python tools/profile_call.py [--calls 60] [--spec fa2] [--stats] [--gpt2-step]

Queues a long GPU sleep first, so the host never waits for the GPU, then runs cProfile over
`--calls` calls of flashprobe.attention at GPT-2's shape (B 16, H 12, N 1024, d 64) and prints
the functions with the most own time, per call. `--gpt2-step` profiles whole GPT-2 124M
training steps (forward + backward, bf16 autocast; with `--stats` instrumented and the stats
read back as the trainer does) instead, synchronising after each.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashprobe.errors import OneLineParser


def main() -> None:
    parser = OneLineParser(prog="profile_call.py", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=60)  # ~8 launches each: under the queue depth
    parser.add_argument("--spec", default="fa2")
    parser.add_argument("--stats", action="store_true", help="return_stats=True")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--gpt2-step", action="store_true")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (it profiles the host side of GPU launches)")
    import flashprobe
    from flashprobe.kernels import launch

    shape = (16, 12, 1024, 64)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.requires_grad_() for t in (q, k, v)]

    def call() -> None:
        out = flashprobe.attention(*leaves, causal=True, spec=args.spec, backend="triton",
                                   return_stats=args.stats)  # fmt: skip
        (out[0] if args.stats else out).backward(do)

    if args.gpt2_step:
        call = gpt2_step(args.spec, args.stats)
        args.calls = min(args.calls, 5)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    if not args.gpt2_step:
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


def gpt2_step(spec: str, stats: bool):  # type: ignore[no-untyped-def]
    """One GPT-2 124M training step (batch 16 × 1024), synchronised, as a callable."""
    import contextlib

    import torch

    from flashprobe.model import GPT, ModelConfig

    attention = {"impl": "flashprobe", "spec": spec, "backend": "triton"}
    config = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024,
              "vocab_size": 50304, "attention": attention}  # fmt: skip
    model = GPT(ModelConfig.from_dict(config)).cuda()
    tokens = torch.randint(0, 50304, (16, 1024), device="cuda")

    def step() -> None:
        recording = model.instrument(stats=True) if stats else contextlib.nullcontext()
        with recording as recorder:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, loss = model(tokens, tokens)
            loss.backward()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if recorder is not None:
            recorder.stats_dict()

    return step


if __name__ == "__main__":
    main()
