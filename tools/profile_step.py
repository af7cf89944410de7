"""Where a training step of a suite's cell spends its time: a torch.profiler breakdown (one GPU).

    python tools/profile_step.py ablations/quick.yaml --variant paper-code --out $OUT \
        [--steps 40] [--active 10] [--set train.batch_size=16 ...]

Runs the variant's first cell (the suite's first seed) for --steps steps in this one process,
profiles the last --active of them (CPU and CUDA), and prints: wall ms per step, the GPU busy
time per step by kernel family (flashprobe's Triton attention kernels, matmuls,
everything else), and the top kernels. Writes the same as JSON (and a gzipped Chrome trace)
into OUT.
What to measure before making training faster (CUDA graphs, torch.compile): a launch-bound
step has GPU busy time far below its wall time. Without a GPU (a check of the script, e.g.
with ablations/smoke.yaml) it ranks CPU ops by their own time instead.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashprobe.errors import OneLineParser  # noqa: E402

FAMILIES = (  # (family, substrings of kernel names), first match wins
    ("attention (flashprobe Triton)", ("attn_fwd_kernel", "attn_bwd")),  # kernels/*.py
    ("matmul", ("gemm", "sm90", "cutlass", "cublas", "matmul", "xmma", "nvjet")),
)


def family(name: str) -> str:
    lowered = name.lower()
    for label, keys in FAMILIES:
        if any(k in lowered for k in keys):
            return label
    return "other (elementwise, norms, reductions, optimizer)"


def main() -> None:
    parser = OneLineParser(prog="profile_step.py", description=__doc__.split("\n")[0])
    parser.add_argument("suite", type=Path)
    parser.add_argument("--variant", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--active", type=int, default=10)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from flashprobe.errors import FlashprobeError
    from flashprobe.suites.cell_config import normalise_cell_config, resolve_cell_config
    from flashprobe.suites.suite import load_suite
    from flashprobe.train import train_run

    overrides = [f"train.steps={args.steps}", "train.checkpoint_final=false", "capture.steps=[]",
                 *args.overrides]  # fmt: skip
    try:
        suite = load_suite(args.suite, overrides, normalise_cell_config)
    except FlashprobeError as exc:
        parser.error(str(exc))
    cell = next((c for c in suite.cells if c.variant == args.variant), None)
    if cell is None:
        parser.error(f"no variant {args.variant!r} in {args.suite}")
    config = resolve_cell_config(cell.config).train
    cuda = torch.cuda.is_available()
    if config.train.device == "cuda" and not cuda:
        parser.error(f"{args.suite} trains on cuda and this machine has no CUDA GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    wait = max(0, args.steps - args.active - 2)
    marks: list[float] = []
    with profile(
        activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])],
        schedule=schedule(wait=wait, warmup=2, active=args.active),
    ) as prof:

        def step_done(_record: dict) -> None:
            if cuda:
                torch.cuda.synchronize()
            marks.append(time.perf_counter())
            prof.step()

        with tempfile.TemporaryDirectory() as tmp:
            train_run(config, Path(tmp) / "run", progress=step_done)
    timed = marks[-args.active - 1 :]
    wall_ms = 1e3 * (timed[-1] - timed[0]) / (len(timed) - 1)
    kernels: dict[str, tuple[float, int]] = {}
    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    for event in prof.key_averages():
        if cuda:
            us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        else:
            us = event.self_cpu_time_total
        # Record-function ranges (ProfilerStep*, Optimizer.step#...) also appear on the GPU
        # timeline as user annotations spanning their kernels: not kernel time.
        if us and event.device_type == kind and not getattr(event, "is_user_annotation", False):
            total, count = kernels.get(event.key, (0.0, 0))
            kernels[event.key] = (total + us, count + event.count)
    busy: dict[str, float] = {}
    for name, (us, _count) in kernels.items():
        busy[family(name)] = busy.get(family(name), 0.0) + us / 1e3 / args.active
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:25]
    result = {
        "suite": str(args.suite),
        "variant": args.variant,
        "overrides": overrides,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "torch": torch.__version__,
        "wall_ms_per_step": wall_ms,
        "gpu_busy_ms_per_step": sum(busy.values()),
        "by_family_ms_per_step": busy,
        "top_kernels": [
            {"name": n, "ms_per_step": us / 1e3 / args.active, "calls_per_step": c / args.active}
            for n, (us, c) in top
        ],
    }
    busy_label = "GPU busy" if cuda else "in ops"
    print(f"{args.variant}: {wall_ms:.1f} ms/step wall, "
          f"{result['gpu_busy_ms_per_step']:.1f} ms/step {busy_label}")  # fmt: skip
    for label, ms in sorted(busy.items(), key=lambda kv: -kv[1]):
        print(f"  {ms:7.2f} ms  {label}")
    for row in result["top_kernels"]:
        print(f"  {row['ms_per_step']:7.3f} ms  x{row['calls_per_step']:5.1f}  {row['name'][:90]}")
    (args.out / f"profile-{args.variant}.json").write_text(json.dumps(result, indent=1) + "\n")
    prof.export_chrome_trace(str(args.out / f"trace-{args.variant}.json.gz"))  # gzip: small


if __name__ == "__main__":
    main()
