"""A/B the forward kernel: this tree's `forward.py` against another version of it, one process.

    git show main:flashprobe/kernels/forward.py > base_forward.py
    PYTHONUNBUFFERED=1 python tools/ab_forward.py --baseline base_forward.py --out $OUT [--sweep]

Both kernels run on the same inputs with the same launch config (kernels/tuned), per shape
(bf16, 16 heads, batch x seq = 32k tokens) and implementation (fa2, sfa, fa2 with stats), next
to SDPA's flash and cuDNN forward. Prints TFLOP/s (4*B*H*N^2*D, x0.5 causal) and new / baseline,
and writes OUT/ab_forward.json. The baseline file must define `attn_fwd_kernel` with the same
arguments. --sweep also times the new kernel's launch-config candidates
(`autotune.fwd_candidates`) at N = 4096 for fa2 and sfa, to see whether the tuned configs still
fit it. Kernels are compiled first in parallel worker processes (Triton's disk cache then
serves the timing process).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flashprobe.probes.benchmark import BenchShape

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

IMPLS = (("fa2", False), ("sfa", False), ("fa2", True))  # (preset, instrumented)
SWEEP_SEQ = 4096


def _label(preset: str, instrument: bool) -> str:
    return preset + ("+stats" if instrument else "")


@contextlib.contextmanager
def kernel_version(version: str, baseline: Path | None) -> Iterator[None]:
    """Run `launch.attention_forward` with this tree's kernel ("new") or the baseline's."""
    from flashprobe.kernels import launch

    if version == "new":
        yield
        return
    from flashprobe.kernels.fastlaunch import Launcher

    assert baseline is not None
    saved = launch._FORWARD
    launch._FORWARD = Launcher(_baseline_kernel(baseline))
    try:
        yield
    finally:
        launch._FORWARD = saved


@functools.cache
def _baseline_kernel(path: Path) -> object:
    spec = importlib.util.spec_from_file_location("flashprobe_baseline_forward", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.attn_fwd_kernel


def _forward_fn(version: str, baseline: Path | None, preset: str, instrument: bool,
                shape: BenchShape, config: dict | None) -> Callable[[], object]:  # fmt: skip
    """One forward launch of `version`'s kernel on fresh inputs of `shape`."""
    from flashprobe.kernels import autotune, tuning
    from flashprobe.probes import benchmark as bench
    from flashprobe.spec import make_spec

    q, k, v, _ = bench.make_inputs(shape)
    cfg = tuning.FwdConfig(**config) if config else None
    fn = autotune.forward_fn(shape.causal, make_spec(preset), q, k, v, instrument=instrument,
                             config=cfg)  # fmt: skip

    def run() -> object:
        with kernel_version(version, baseline):
            return fn()

    return run


def _forward_ms(version: str, baseline: Path | None, preset: str, instrument: bool,
                shape: BenchShape, config: dict | None) -> float:  # fmt: skip
    """Median ms of one forward launch."""
    from flashprobe.kernels import autotune

    return autotune.time_ms(_forward_fn(version, baseline, preset, instrument, shape, config))


def _compile_task(task: tuple) -> str:
    """Compile one variant by running it once on a small input (fills Triton's disk cache)."""
    import torch

    from flashprobe.probes import benchmark as bench

    version, baseline, preset, instrument, head_dim, causal, config = task
    shape = bench.BenchShape(1, 4, 1024, head_dim, causal)
    try:
        _forward_fn(version, baseline, preset, instrument, shape, config)()
        torch.cuda.synchronize()
    except Exception as exc:
        return f"FAIL {task}: {str(exc).splitlines()[0][:120]}"
    return "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another forward.py")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seqs", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--sweep", action="store_true", help="time launch-config candidates")
    parser.add_argument("--workers", type=int, default=12)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    baseline = args.baseline.resolve()

    from flashprobe.environment import environment
    from flashprobe.kernels import autotune, tuning
    from flashprobe.probes import benchmark as bench

    masks = (True, False)
    tasks = [(ver, baseline, p, inst, d, c, None)
             for ver in ("baseline", "new") for p, inst in IMPLS
             for d in args.head_dims for c in masks]  # fmt: skip
    sweep = [(p, d, c, tuning.config_dict(cfg)) for p in ("fa2", "sfa") for d in args.head_dims
             for c in masks for cfg in autotune.fwd_candidates(d)]  # fmt: skip
    if args.sweep:
        tasks += [("new", baseline, p, False, d, c, cfg) for p, d, c, cfg in sweep]
    autotune.compile_in_parallel(_compile_task, tasks, args.workers)

    rows = []
    for shape in bench.default_shapes(args.seqs, args.head_dims):
        q, k, v, do = bench.make_inputs(shape)
        peers = {}
        for impl in bench.implementations([], False, peers=True):
            try:
                inputs = bench.to_layout((q, k, v, do), impl.layout)
                fn = bench.step_fn(bench.attend_fn(impl, shape), *inputs, "fwd")
                peers[impl.name] = autotune.time_ms(fn)
            except Exception as exc:  # a backend may not support the shape on this build
                print(f"  {impl.name} {shape.label()}: {str(exc).splitlines()[0][:80]}")
        del q, k, v, do
        flops = shape.flops("fwd")
        for preset, instrument in IMPLS:
            ms = {ver: _forward_ms(ver, baseline, preset, instrument, shape, None)
                  for ver in ("baseline", "new")}  # fmt: skip
            row = {**shape.__dict__, "impl": _label(preset, instrument), **{
                f"{ver}_tflops": flops / t / 1e9 for ver, t in ms.items()},
                **{f"{name}_tflops": flops / t / 1e9 for name, t in peers.items()}}  # fmt: skip
            row["new_over_baseline"] = ms["baseline"] / ms["new"]
            rows.append(row)
            print(f"{shape.label():32s} {row['impl']:10s} base {row['baseline_tflops']:6.1f} "
                  f"new {row['new_tflops']:6.1f} TFLOP/s  new/base {row['new_over_baseline']:.3f}  "
                  + "  ".join(f"{n} {flops / t / 1e9:6.1f}" for n, t in peers.items()),
                  flush=True)  # fmt: skip
    _print_ratios(rows)

    sweep_rows = []
    if args.sweep:
        for preset, d, c, cfg in sweep:
            shape = bench.BenchShape(32768 // SWEEP_SEQ, 16, SWEEP_SEQ, d, c)
            try:
                ms = _forward_ms("new", baseline, preset, False, shape, cfg)
            except Exception as exc:
                print(f"  skip {preset} d{d} causal={c} {cfg}: {str(exc).splitlines()[0][:80]}")
                continue
            tflops = shape.flops("fwd") / ms / 1e9
            sweep_rows.append({"preset": preset, "head_dim": d, "causal": c, "config": cfg,
                               "ms": ms, "tflops": tflops})  # fmt: skip
            print(f"sweep {preset} d{d} {'causal' if c else 'full'} {cfg}: {tflops:.1f}")
    result = {"environment": environment("cuda"), "rows": rows, "sweep": sweep_rows}
    (args.out / "ab_forward.json").write_text(json.dumps(result, indent=1, default=str))


def _print_ratios(rows: list[dict]) -> None:
    """Per implementation: the range of new/baseline, and of each version against fa2."""
    by_shape: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        key = (row["head_dim"], row["causal"], row["seq"])
        by_shape.setdefault(key, {})[row["impl"]] = row
    for impl in (_label(p, i) for p, i in IMPLS):
        ratios = [r[impl]["new_over_baseline"] for r in by_shape.values()]
        print(f"{impl}: new/baseline {min(ratios):.3f}-{max(ratios):.3f}")
        if impl == "fa2":
            continue
        for ver in ("baseline", "new"):
            vs = [r[impl][f"{ver}_tflops"] / r["fa2"][f"{ver}_tflops"] for r in by_shape.values()]
            print(f"  {ver}: {impl}/fa2 {min(vs):.3f}-{max(vs):.3f}")


if __name__ == "__main__":
    main()
