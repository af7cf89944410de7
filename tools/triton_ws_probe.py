"""Does Triton's own Hopper warp specialisation speed up an `fa2` forward? A probe, not a kernel.

Triton 3.6 runs Meta's Hopper warp-specialisation pass on sm_90 for a loop marked
`tl.range(..., warp_specialize=True)`, and upstream enabled it for attention only with
device-side tensor descriptors and no causal mask (triton-lang/triton#7658). flashprobe's
kernels load through pointers, so that path has never been timed here (issue 26). This probe
is FlashAttention-2's forward numerics in that form (fp32 scores, fp32 running max, sum and
output, P̄ rounded to the input dtype for P̄V; non-causal, N a multiple of the tiles), checked
against an fp64 golden beside flashprobe's `fa2` forward, and timed beside `fa2` and SDPA's
cuDNN backend, each tile config with and without `warp_specialize`:

    python tools/triton_ws_probe.py --out $OUT/triton-ws-probe.json      # one H200 call

On a machine without a GPU, `--check` runs the kernel under Triton's interpreter on a small
shape (operands upcast to fp32: the interpreter's bf16 `tl.dot` is wrong, and bf16 products
are exact in fp32) and compares it with the golden; it times nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

if not torch.cuda.is_available():  # before triton's import: the kernel runs interpreted
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from flashprobe.environment import environment
from flashprobe.errors import FlashprobeError
from flashprobe.numerics.gate import gate, reference_attention, rel_l2
from flashprobe.reference.golden import golden_forward
from flashprobe.reporting.atomic import check_new_files

LOG2E = 1.4426950408889634
#: (BLOCK_M, BLOCK_N, num_warps, num_stages), each timed with warp_specialize off and on.
CONFIGS = [(128, n, w, s) for n in (64, 128) for w in (4, 8) for s in (2, 3)]
#: The issue's non-causal shapes: 32k tokens, 16 heads.
SHAPES = [(32768 // n, 16, n, d) for d in (64, 128) for n in (1024, 4096, 16384)]


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, rows, N,
             D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             WARP_SPECIALIZE: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    # One program per (query tile, batch × head); q, k, v, o are [rows, D] with rows = B·H·N.
    start_m = tl.program_id(0)
    first = tl.program_id(1) * N
    q_desc = tl.make_tensor_descriptor(q_ptr, [rows, D], [D, 1], [BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(k_ptr, [rows, D], [D, 1], [BLOCK_N, D])
    v_desc = tl.make_tensor_descriptor(v_ptr, [rows, D], [D, 1], [BLOCK_N, D])
    o_desc = tl.make_tensor_descriptor(o_ptr, [rows, D], [D, 1], [BLOCK_M, D])
    q = q_desc.load([first + start_m * BLOCK_M, 0])
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in tl.range(0, N, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        k = k_desc.load([first + start_n, 0])
        v = v_desc.load([first + start_n, 0])
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        p_bar = p.to(v.dtype)  # P̄ in the input dtype, as FlashAttention-2 feeds P̄V
        if UPCAST:
            p_bar, v = p_bar.to(tl.float32), v.to(tl.float32)
        acc = tl.dot(p_bar, v, acc * alpha[:, None])
        m_i = m_new
    o_desc.store([first + start_m * BLOCK_M, 0], (acc / l_i[:, None]).to(o_ptr.dtype.element_ty))


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, config: Sequence[int],
            warp_specialize: bool) -> torch.Tensor:  # fmt: skip
    """Non-causal attention of [B, H, N, D] tensors; N a multiple of both tiles."""
    block_m, block_n, num_warps, num_stages = config
    batch, heads, n, d = q.shape
    if n % block_m or n % block_n:
        raise ValueError(f"N {n} is not a multiple of the tiles {block_m}, {block_n}")
    out = torch.empty_like(q)
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    _forward[(n // block_m, batch * heads)](
        q, k, v, out, LOG2E / math.sqrt(d), batch * heads * n, n, d, block_m, block_n,
        warp_specialize, interpreting, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out


def _allocate(size: int, align: int, stream: Any) -> torch.Tensor:
    """Scratch for device-side tensor descriptors (Triton asks for it with set_allocator)."""
    return torch.empty(
        size, dtype=torch.int8, device="cuda" if torch.cuda.is_available() else "cpu"
    )


def check(seed: int = 0) -> dict[str, Any]:
    """The probe on a small shape through the project's numerics gate (numerics.gate: its
    error against the fp64 golden within 2× bf16 PyTorch attention's plus the bf16 floor)."""
    triton.set_allocator(_allocate)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(1, 2, 128, 64, generator=gen, device=device).to(torch.bfloat16)
               for _ in range(3))  # fmt: skip
    golden = golden_forward(q, k, v, causal=False).o
    torch_bf16, _ = reference_attention(q, k, v, causal=False)
    results = {}
    for warp_specialize in (False, True):
        for block_n in (32, 64):
            out = forward(q, k, v, (64, block_n, 4, 2), warp_specialize)
            found = gate(out, torch_bf16, golden, dtype=torch.bfloat16)
            results[f"BLOCK_N {block_n}, warp_specialize {warp_specialize}"] = {
                "error": found.error, "bound": found.bound, "passed": found.passed,
            }  # fmt: skip
    return {"torch_bf16": rel_l2(torch_bf16, golden), "probe": results}


def time_shapes(
    shapes: Sequence[tuple[int, int, int, int]], save: Callable[[list[dict[str, Any]]], None]
) -> list[dict[str, Any]]:
    """Per shape: fa2 and cuDNN forward, and each config with warp_specialize off and on.
    `save(rows)` runs before every compile: a config that crashes the process (a compiler
    abort is not an exception) is left marked "compiling" in what was saved."""
    triton.set_allocator(_allocate)
    rows: list[dict[str, Any]] = []
    for batch, heads, n, d in shapes:
        rows.append({})
        time_shape(batch, heads, n, d, rows[-1], lambda: save(rows))
        print(summary_line(rows[-1]), flush=True)
    save(rows)
    return rows


def time_shape(
    batch: int, heads: int, n: int, d: int, row: dict[str, Any], save: Callable[[], None]
) -> None:
    from flashprobe.probes.benchmark import (
        BenchShape,
        Implementation,
        _do_bench_median,
        attend_fn,
        make_inputs,
    )
    from flashprobe.spec import make_spec

    shape = BenchShape(batch, heads, n, d, causal=False)
    q, k, v, _ = make_inputs(shape)
    # fp64 on one batch's two heads; a config is judged by the project's numerics gate there
    golden = golden_forward(q[:1, :2], k[:1, :2], v[:1, :2], causal=False).o
    torch_bf16, _ = reference_attention(q[:1, :2], k[:1, :2], v[:1, :2], causal=False)
    row.update(shape=shape.label(), tflop=shape.flops("fwd") / 1e12,
               torch_bf16_error=rel_l2(torch_bf16, golden))  # fmt: skip
    peers = {
        "fa2": Implementation("fa2", spec=make_spec("fa2")),
        "sdpa-cudnn": Implementation("sdpa-cudnn", sdpa_backend="CUDNN_ATTENTION"),
    }
    for name, impl in peers.items():
        attend = attend_fn(impl, shape)
        try:
            with torch.no_grad():
                out = attend(q, k, v)
                row[f"{name}_ms"] = _do_bench_median(lambda a=attend: a(q, k, v))
            row[f"{name}_error"] = rel_l2(out[:1, :2], golden)
        except RuntimeError as exc:  # a backend that refuses the shape here
            row[f"{name}_ms"], row[f"{name}_note"] = None, str(exc).splitlines()[0][:200]
    for config in CONFIGS:
        for warp_specialize in (False, True):
            label = "{}x{} w{} s{}".format(*config) + (" ws" if warp_specialize else "")
            row[label] = {"ms": None, "note": "compiling"}
            save()
            try:
                out = forward(q, k, v, config, warp_specialize)
                ms = _do_bench_median(lambda c=config, w=warp_specialize: forward(q, k, v, c, w))
                found = gate(out[:1, :2], torch_bf16, golden, dtype=q.dtype)
                row[label] = {"ms": ms, "error": found.error, "passed": found.passed}
            except Exception as exc:  # a config Triton cannot compile is a result, not a stop
                row[label] = {"ms": None, "note": str(exc).splitlines()[0][:200]}


def summary_line(row: dict[str, Any]) -> str:
    """The best config with and without warp_specialize, as ratios of fa2's and cuDNN's time;
    a config whose output failed the numerics gate is never the best, only named as wrong."""
    configs = {k: v for k, v in row.items() if isinstance(v, dict)}

    def passed(result: dict[str, Any]) -> bool:
        # files written before the gate's verdict was recorded: a finite error
        return bool(result.get("passed", math.isfinite(result.get("error", math.nan))))

    wrong = [k for k, v in configs.items() if v.get("ms") and not passed(v)]

    def best(ws: bool) -> tuple[str, float] | None:
        timed = [(k, v["ms"]) for k, v in configs.items()
                 if v.get("ms") and passed(v) and k.endswith(" ws") == ws]  # fmt: skip
        return min(timed, key=lambda kv: kv[1]) if timed else None

    peers = {"fa2": row.get("fa2_ms"), "cuDNN": row.get("sdpa-cudnn_ms")}
    parts = [row["shape"]] + [f"{name} {ms:.3f} ms" for name, ms in peers.items() if ms]
    for ws in (False, True):
        found = best(ws)
        if found:
            label, ms = found
            ratios = [f"{peer / ms:.2f}× {name}" for name, peer in peers.items() if peer]
            parts.append(f"{label}: " + ", ".join(ratios or [f"{ms:.3f} ms"]))
    if wrong:
        parts.append("wrong output: " + ", ".join(wrong))
    return " | ".join(parts)


def table_lines(path: Path) -> list[str]:
    """The summary lines of a file `--out` wrote; ValueError saying what is wrong with it."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg}, line {exc.lineno})") from None
    shapes = saved.get("shapes") if isinstance(saved, dict) else None
    if not isinstance(shapes, list) or not all(isinstance(r, dict) for r in shapes):
        raise ValueError("no list of shapes: not a file this probe wrote")
    try:
        return [summary_line(row) for row in shapes]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"a malformed shape row ({exc!r})") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the timings here (JSON)")
    parser.add_argument("--check", action="store_true", help="only the small-shape check")
    parser.add_argument("--table", type=Path, help="print the summary of a saved file, run nothing")
    args = parser.parse_args(argv)
    if args.table:
        try:
            print("\n".join(table_lines(args.table)))
        except ValueError as exc:
            parser.error(f"--table {args.table}: {exc}")  # one line, exit 2
        return 0
    try:  # before the minutes of work: the project's rule for a result file already there
        check_new_files([args.out] if args.out else [], "remove it or choose another --out")
    except FlashprobeError as exc:
        parser.error(f"--out: {exc}")
    if not args.check and not torch.cuda.is_available():
        parser.error("timing needs a CUDA GPU (--check runs without one)")
    device = "cuda" if torch.cuda.is_available() else None
    # environment: code version, torch, triton, GPU; the inputs are make_inputs' seed 0
    result: dict[str, Any] = {"check": check(), "environment": environment(device), "seed": 0,
                              "triton": triton.__version__, "torch": torch.__version__}  # fmt: skip
    print(json.dumps(result["check"], indent=2))

    def save(rows: list[dict[str, Any]]) -> None:
        if args.out:
            args.out.write_text(json.dumps({**result, "shapes": rows}, indent=2))

    if args.check:
        save([])
    else:
        result["gpu"] = torch.cuda.get_device_name()
        time_shapes(SHAPES, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
