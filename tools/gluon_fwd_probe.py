"""Probe: an FA3-style pipelined forward in Gluon (Triton 3.6, sm_90), against the Triton kernel.

    PYTHONUNBUFFERED=1 python tools/gluon_fwd_probe.py --out $OUT          # on the H200
    python tools/gluon_fwd_probe.py --compile-only                         # any machine

An experiment for issue 3's open question, not a flashprobe kernel: can overlapping the
softmax with the matrix units hide the stabilized softmax's tie test (and make `fa2` itself
faster)? The kernel keeps `fa2`'s forward numerics (fp32 scores x = s·scale·log2e, exact
x − m, fp32 P̄ summed into ℓ, P̄ rounded to bf16 for P̄V, fp32 accumulators) and, with
STABILIZED, the paper's tie shift (β, tolerance; the tie test is the two largest scores per
tile). What differs from flashprobe's Triton forward is only the schedule, FA3's
intra-warpgroup pipelining: K/V tiles arrive by TMA into a ring of STAGES buffers; tile j+1's
QKᵀ is in flight while tile j's output is rescaled and its P̄V issued, and tile j's P̄V is in
flight while tile j+1's softmax runs, so the tensor cores work during the exp2s and
reductions. Triton's own compiler waits for every outstanding wgmma before a P̄V, which is why
flashprobe's kernel cannot do this (docs/kernel-performance.md, design notes).

Scope of the probe: bf16, head dim 64 or 128, sequence a multiple of 128, causal or not, no
instrumentation, no other KernelSpec switch. It checks O and LSE against flashprobe's Triton
forward of the same preset (same rounding points; only fp32 summation order differs) and times
both beside SDPA cuDNN, writing OUT/gluon_probe.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashprobe.kernels.common import _top2_combine  # noqa: E402

LOG2E = 1.4426950408889634


@gluon.jit
def _softmax_tile(s, m_i, l_i, cols, rows, qk_scale, tie_tol, beta,
                  MASK: gl.constexpr, STABILIZED: gl.constexpr):  # fmt: skip
    """One tile's online-softmax step on the fp32 scores `s`: (P̄ fp32, alpha, new m, new ℓ)."""
    x = s * qk_scale
    if MASK:
        x = gl.where(cols[None, :] <= rows[:, None], x, float("-inf"))
    if STABILIZED:
        r, second = gl.reduce((x, gl.full_like(x, float("-inf"))), 1, _top2_combine)
        tied = (second >= r - tie_tol) & (r > float("-inf"))
        m_tile = gl.where(tied, gl.where(r > 0, beta * r, 0.0), r)
    else:
        m_tile = gl.max(x, 1)
    m_new = gl.maximum(m_i, m_tile)
    p = gl.exp2(x - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, bars, row, tile, STAGES: gl.constexpr):
    slot = tile % STAGES
    bar = bars.index(slot)
    mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row, 0], bar, k_smem.index(slot))
    tma.async_copy_global_to_shared(v_desc, [row, 0], bar, v_smem.index(slot))


@gluon.jit
def attn_fwd_pipelined(
    q_desc, k_desc, v_desc, Out, LSE, N, qk_scale, tie_tol, beta,
    HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    CAUSAL: gl.constexpr, STABILIZED: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    gl.static_assert(STAGES >= 2)
    dtype: gl.constexpr = q_desc.dtype
    start_m = gl.program_id(0)
    bh = gl.program_id(1)
    head_row = bh * N  # first row of this (batch, head) in the [B·H·N, D] views

    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    cols_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    cols_o: gl.constexpr = gl.SliceLayout(0, o_layout)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(kv_bars.index(i), count=1)

    if CAUSAL:
        n_tiles = gl.cdiv(gl.minimum((start_m + 1) * BLOCK_M, N), BLOCK_N)
        first_masked = (start_m * BLOCK_M) // BLOCK_N
    else:
        n_tiles = N // BLOCK_N
        first_masked = n_tiles

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [head_row + start_m * BLOCK_M, 0], q_bar, q_smem)
    for t in gl.static_range(STAGES):
        if t < n_tiles:
            _load_kv(k_desc, v_desc, k_smem, v_smem, kv_bars, head_row + t * BLOCK_N, t, STAGES)

    rows = start_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_s)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=rows_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=rows_s)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

    mbarrier.wait(q_bar, phase=0)
    mbarrier.wait(kv_bars.index(0), phase=0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False,
                      is_async=True)  # fmt: skip
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    cols = gl.arange(0, BLOCK_N, layout=cols_s)
    if first_masked == 0:
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, cols, rows, qk_scale, tie_tol, beta,
                                           True, STABILIZED)  # fmt: skip
    else:
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, cols, rows, qk_scale, tie_tol, beta,
                                           False, STABILIZED)  # fmt: skip
    # FA3's intra-warpgroup overlap. Nothing is in flight across the loop's back edge (ptxas
    # serialises every wgmma when an in-flight accumulator is copied at a loop phi).
    for j in range(n_tiles - 1):
        nxt = (j + 1) % STAGES
        mbarrier.wait(kv_bars.index(nxt), phase=((j + 1) // STAGES) & 1)
        s_next = warpgroup_mma(q_smem, k_smem.index(nxt).permute((1, 0)), s_zero,
                               use_acc=False, is_async=True)  # fmt: skip
        acc = acc * gl.convert_layout(alpha, rows_o)[:, None]
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        pv = warpgroup_mma(p_op, v_smem.index(j % STAGES), acc, is_async=True)
        # S_{j+1} done; tile j's P̄V stays in flight through tile j+1's softmax.
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_next,))
        cols = (j + 1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=cols_s)
        if j + 1 >= first_masked:
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, cols, rows, qk_scale, tie_tol,
                                               beta, True, STABILIZED)  # fmt: skip
        else:
            p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, cols, rows, qk_scale, tie_tol,
                                               beta, False, STABILIZED)  # fmt: skip
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
        # Tile j's K and V are consumed: prefetch tile j + STAGES into their buffers.
        if j + STAGES < n_tiles:
            _load_kv(k_desc, v_desc, k_smem, v_smem, kv_bars, head_row + (j + STAGES) * BLOCK_N,
                     j + STAGES, STAGES)  # fmt: skip
    last = n_tiles - 1
    acc = acc * gl.convert_layout(alpha, rows_o)[:, None]
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    pv = warpgroup_mma(p_op, v_smem.index(last % STAGES), acc, is_async=True)
    out = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(kv_bars.index(i))
    mbarrier.invalidate(q_bar)

    l_o = gl.convert_layout(l_i, rows_o)
    o = out / l_o[:, None]
    offs_m = start_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_o)
    offs_d = gl.arange(0, HEAD_DIM, layout=cols_o)
    gl.store(Out + (head_row + offs_m)[:, None].to(gl.int64) * HEAD_DIM + offs_d[None, :],
             o.to(dtype))  # fmt: skip
    lse = (m_i + gl.log2(l_i)) / 1.4426950408889634
    gl.store(LSE + head_row + rows, lse)


def forward(q, k, v, *, causal: bool, stabilized: bool, beta: float = 2.0,
            tie_tol: float = 1e-3, block_m: int = 128, block_n: int = 64, stages: int = 2,
            num_warps: int = 8):  # fmt: skip
    """Gluon forward on [B, H, N, D] bf16 contiguous inputs → (O, LSE)."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    batch, heads, n, d = q.shape
    assert n % 128 == 0 and q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
    o = torch.empty_like(q)
    lse = torch.empty((batch, heads, n), device=q.device, dtype=torch.float32)
    q2, k2, v2 = (t.view(batch * heads * n, d) for t in (q, k, v))
    q_layout = gl.NVMMASharedLayout.get_default_for([block_m, d], gl.bfloat16)
    kv_layout = gl.NVMMASharedLayout.get_default_for([block_n, d], gl.bfloat16)
    q_desc = TensorDescriptor.from_tensor(q2, [block_m, d], q_layout)
    k_desc = TensorDescriptor.from_tensor(k2, [block_n, d], kv_layout)
    v_desc = TensorDescriptor.from_tensor(v2, [block_n, d], kv_layout)
    grid = (n // block_m, batch * heads)
    attn_fwd_pipelined[grid](
        q_desc, k_desc, v_desc, o, lse, n, LOG2E / math.sqrt(d), tie_tol * LOG2E, beta,
        d, block_m, block_n, stages, causal, stabilized, num_warps=num_warps,
        enable_fp_fusion=False,
    )  # fmt: skip
    return o, lse


def compile_only() -> None:
    """Compile for sm_90a without a GPU (API and layout errors show up here)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for d in (64, 128):
        for stabilized in (False, True):
            for causal in (False, True):
                q_l = gl.NVMMASharedLayout.get_default_for([128, d], gl.bfloat16)
                kv_l = gl.NVMMASharedLayout.get_default_for([64, d], gl.bfloat16)
                signature = {
                    "q_desc": f"tensordesc<bf16[128, {d}],{q_l!r}>",
                    "k_desc": f"tensordesc<bf16[64, {d}],{kv_l!r}>",
                    "v_desc": f"tensordesc<bf16[64, {d}],{kv_l!r}>",
                    "Out": "*bf16", "LSE": "*fp32", "N": "i32",
                    "qk_scale": "fp32", "tie_tol": "fp32", "beta": "fp32",
                }  # fmt: skip
                constexprs = {"HEAD_DIM": d, "BLOCK_M": 128, "BLOCK_N": 64, "STAGES": 2,
                              "CAUSAL": causal, "STABILIZED": stabilized,
                              "num_warps": 8}  # fmt: skip
                for name in constexprs:
                    signature[name] = "constexpr"
                src = GluonASTSource(attn_fwd_pipelined, signature, constexprs)
                options = {"num_warps": 8, "enable_fp_fusion": False}
                kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
                print(f"d{d} stabilized={stabilized} causal={causal}: compiled, "
                      f"{len(kernel.asm['cubin'])} B cubin")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--seqs", type=int, nargs="+", default=[4096, 16384])
    args = parser.parse_args()
    if args.compile_only:
        compile_only()
        return

    import torch

    from flashprobe.environment import environment
    from flashprobe.kernels import autotune, launch
    from flashprobe.probes import benchmark as bench
    from flashprobe.spec import make_spec

    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    # Correctness on a small and an odd-head-count shape, then speed.
    for d in (64, 128):
        for causal in (True, False):
            for preset in ("fa2", "sfa"):
                shape = bench.BenchShape(2, 3, 512, d, causal)
                q, k, v, _ = bench.make_inputs(shape)
                o, lse = forward(q, k, v, causal=causal, stabilized=preset == "sfa")
                ref = launch.attention_forward(q, k, v, causal=causal, spec=make_spec(preset),
                                               scale=1 / math.sqrt(d))  # fmt: skip
                err_o = (o.float() - ref.o.float()).abs().max().item()
                err_lse = (lse - ref.lse).abs().max().item()
                ok = err_o <= 1e-2 and err_lse <= 1e-4 and not o.isnan().any().item()
                verdict = "ok" if ok else "MISMATCH"
                print(f"check d{d} causal={causal} {preset}: max|ΔO| {err_o:.2e} "
                      f"max|ΔLSE| {err_lse:.2e} {verdict}", flush=True)  # fmt: skip
                rows.append({"check": True, "head_dim": d, "causal": causal, "preset": preset,
                             "max_abs_o": err_o, "max_abs_lse": err_lse, "ok": ok})  # fmt: skip
    for shape in bench.default_shapes(args.seqs, (64, 128)):
        q, k, v, do = bench.make_inputs(shape)
        flops = shape.flops("fwd")
        cudnn = bench.Implementation("sdpa-cudnn", sdpa_backend="CUDNN_ATTENTION")
        times = {"sdpa-cudnn": autotune.time_ms(
            bench.step_fn(bench.attend_fn(cudnn, shape), q, k, v, do, "fwd"))}  # fmt: skip
        for preset in ("fa2", "sfa"):
            spec = make_spec(preset)
            times[f"triton-{preset}"] = autotune.time_ms(
                autotune.forward_fn(shape.causal, spec, q, k, v)
            )
            for stages in (2, 3):
                run = functools.partial(forward, q, k, v, causal=shape.causal,
                                        stabilized=preset == "sfa", stages=stages)  # fmt: skip
                times[f"gluon-{preset}-s{stages}"] = autotune.time_ms(run)
        tflops = {name: flops / ms / 1e9 for name, ms in times.items()}
        print(shape.label(), "  ".join(f"{n} {t:.0f}" for n, t in tflops.items()), flush=True)
        rows.append({**shape.__dict__, "tflops": tflops})
        del q, k, v, do
        torch.cuda.empty_cache()
    payload = {"environment": environment("cuda"), "rows": rows}
    (args.out / "gluon_probe.json").write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
