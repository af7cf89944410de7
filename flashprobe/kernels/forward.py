"""Forward flash-attention kernel whose rounding points are KernelSpec switches.

The structure is the Triton fused-attention tutorial's (base-2 domain, one program per query
tile and batch·head, causal split into an unmasked off-diagonal stage and a masked diagonal
stage), with every step of docs/semantics.md made explicit:

* scores: fp32 `x = s_raw * scale * LOG2E`, or `s = rnd(s_raw * scale)` then `x = s * LOG2E`;
* running max: standard/fused_scale `m' = r`, stabilized `m' = beta*r` (or 0) on a tied tile;
* P̄: `exp2(x - m)` exactly (standard, stabilized) or `exp2(fma(s_raw, scale*LOG2E, -m))`;
* P̄ rounded or not before P̄V, ℓ from the rounded or unrounded P̄, fp32 or bf16 accumulators;
* each logical tile's row sum clamped from below (row_sum_floor, the paper's release) or not;
* causal key tiles wholly past a row skipped, or applied as the release runs them
  (masked_tiles = release: after the key loop, in closed form, `_release_masked_tiles`).

`spec.block_n` is a numerics choice (where m is updated), so it is the kernel's logical key
tile. Tiles up to `BLOCK_N` keys run in one pass per tile. Wider logical tiles (the paper's
512, or one tile spanning the whole sequence) run in two passes over `BLOCK_N`-wide physical
sub-tiles: pass 1 finds the tile's row max and whether it is tied (from the two largest
scores, which decides "more than one score within the tolerance" exactly); pass 2 forms P̄ with
the new running max and accumulates P̄V across the sub-tiles in fp32 before the per-tile update.
The result equals one big tile up to the order of fp32 additions.

K and V tiles come through pointers or, where the launch config asks (`tuning.FwdConfig.tma`),
through device-side tensor descriptors (Hopper's TMA copy engine): constexpr `TMA`, the same
values (`common.head_rows`).

The launcher compiles with `enable_fp_fusion=False`: otherwise the compiler contracts
`x*c - m` into one FMA and "standard" would silently become "fused_scale" (the max entry's P̄
no longer exactly 1); the fused mode asks for its FMA explicitly with `tl.fma`.

Interpreter work-arounds (constexpr `INTERPRET`, set by the launcher when the kernels were
built by Triton's interpreter, i.e. TRITON_INTERPRET=1 at import; how CI runs them on CPU):

* Triton 3.9's interpreter returns garbage from `tl.dot` on bf16 operands, while fp32 operands
  are fine. A product of two bf16 (or fp16) numbers is exact in fp32, so under the interpreter
  every 16-bit dot upcasts its operands to fp32 and runs an IEEE fp32 dot: the same numerics,
  only the fp32 summation order may differ.
* The same interpreter truncates fp32 → bf16 casts (`.to(tl.bfloat16)`, round toward zero)
  where the GPU rounds to nearest even; under the interpreter `rnd` therefore rounds to bf16 on
  the bits (add 0x7FFF plus the lowest kept bit, clear the low 16 bits). fp16 casts are right.

Both branches are compiled out on the GPU.
"""

from __future__ import annotations

import triton
import triton.language as tl

from flashprobe.kernels.common import (
    causal_valid,
    count_at_least,
    count_ones,
    dot_low,
    dot_maybe_low,
    head_offsets,
    head_rows,
    head_rows_source,
    load_rows,
    rnd,
    scores_log2,
    to_low,
    top2,
)

_STABILIZED: tl.constexpr = tl.constexpr(1)
_FUSED_SCALE: tl.constexpr = tl.constexpr(2)


@triton.jit
def _scores(q, k_src, stride_kn, offs_m, start, offs_d, N, scale, qk_scale,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
            SCORE_LOW: tl.constexpr, LOW: tl.constexpr, TMA: tl.constexpr,
            INTERPRET: tl.constexpr):  # fmt: skip
    """The key tile [start, start + BLOCK_N)'s raw scores q·kᵀ (fp32) and scores x in log2
    units (semantics step 1).

    Masked entries (keys past N, or above the causal diagonal) are −inf when MASKED.
    """
    offs_n = start + tl.arange(0, BLOCK_N)
    k = head_rows(k_src, start, offs_d, stride_kn, N, BLOCK_N, MASKED, TMA)
    s_raw = dot_low(q, tl.trans(k), None, INTERPRET)
    if MASKED:
        s_raw = tl.where(causal_valid(offs_m, offs_n, N, CAUSAL), s_raw, float("-inf"))
    return s_raw, scores_log2(s_raw, scale, qk_scale, SCORE_LOW, LOW, INTERPRET)


@triton.jit
def _tile_running_max(m_old, r, tied, beta, SOFTMAX: tl.constexpr):
    """Semantics step 3: the tile's shift m' (stabilized: beta·r or 0 when tied) → new max."""
    if SOFTMAX == _STABILIZED:
        m_tile = tl.where(tied, tl.where(r > 0, beta * r, 0.0), r)
    else:
        m_tile = r
    return tl.maximum(m_old, m_tile)


@triton.jit
def _p_bar(s_raw, x, m_new, qk_scale, SOFTMAX: tl.constexpr):
    """Semantics step 4: exact subtraction, or the scale fused into one FMA."""
    if SOFTMAX == _FUSED_SCALE:
        return tl.exp2(tl.fma(s_raw, qk_scale, -m_new[:, None]))
    else:
        return tl.exp2(x - m_new[:, None])


@triton.jit
def _tile_l(p, P_LOW: tl.constexpr, L_FROM_ROUNDED: tl.constexpr, LOW: tl.constexpr,
            INTERPRET: tl.constexpr):  # fmt: skip
    """Semantics step 5: the tile's ℓ from P̄ as the P̄V product sees it, or from fp32 P̄."""
    if L_FROM_ROUNDED and P_LOW:
        return tl.sum(rnd(p, LOW, INTERPRET), 1)
    else:
        return tl.sum(p, 1)


@triton.jit
def _floor_tile_l(l_tile, r, ROW_SUM_FLOOR: tl.constexpr):
    """Semantics step 5's clamp of one logical tile's row sum at ROW_SUM_FLOOR (row_sum_floor
    rounded to the input dtype; 0.0: off, compiled out), on rows with a visible key in the tile
    (r > −inf): the others skip the tile, as without the clamp."""
    if ROW_SUM_FLOOR > 0.0:
        return tl.where(r > float("-inf"), tl.maximum(l_tile, ROW_SUM_FLOOR), l_tile)
    else:
        return l_tile


@triton.jit
def _release_masked_tiles(acc, l_i, m_i, offs_m, start_m, N, tile_n,
                          BLOCK_M: tl.constexpr, SOFTMAX: tl.constexpr, ACC_LOW: tl.constexpr,
                          L_LOW: tl.constexpr, ROW_SUM_FLOOR: tl.constexpr, LOW: tl.constexpr,
                          INTERPRET: tl.constexpr):  # fmt: skip
    """masked_tiles = release: the logical key tiles wholly past each row (causal), which the
    key loop skips, applied as the paper's released kernel runs them with the mask filled in.

    They all come after the row's last visible tile, so applying them after the loop keeps the
    release's order. Every fill score ties, so the first such tile (when it has more than one
    key) moves a stabilized running max to max(m, 0), rescaling O and ℓ by α; P̄ = 0, so O
    changes by nothing else, and each tile adds its row sum 0 clamped to ROW_SUM_FLOOR to ℓ
    (rounded as every ℓ update is)."""
    n_tiles = tl.cdiv(N, tile_n)
    first_past = offs_m // tile_n + 1  # the first logical tile wholly past the row
    n_past = n_tiles - first_past
    if SOFTMAX == _STABILIZED:
        width = tl.minimum(tile_n, N - first_past * tile_n)
        m_new = tl.where((n_past > 0) & (width > 1), tl.maximum(m_i, 0.0), m_i)
    else:
        m_new = m_i
    alpha = tl.where(m_new > m_i, tl.exp2(m_i - m_new), 1.0)
    acc = acc * alpha[:, None]
    if ACC_LOW:
        acc = rnd(acc, LOW, INTERPRET)  # oc.mul_(α).add_(0) on the bf16 buffer
    floor = tl.full([BLOCK_M], ROW_SUM_FLOOR, tl.float32)
    for t in range(0, n_tiles - (start_m * BLOCK_M) // tile_n - 1):
        l_i = tl.where(t < n_past, _running_l(l_i, floor, alpha, L_LOW, LOW, INTERPRET), l_i)
        alpha = tl.full([BLOCK_M], 1.0, tl.float32)  # the running max moves on the first only
    return acc, l_i, m_new


@triton.jit
def _tile_max_and_tie(x, tie_tol, SOFTMAX: tl.constexpr, INSTRUMENT: tl.constexpr,
                      HEAD_DIM: tl.constexpr, INTERPRET: tl.constexpr):  # fmt: skip
    """One key tile's row max r and whether more than one score lies within `tie_tol` of it.

    Two exact forms of the same test: the two largest scores in one reduction (which also
    yields r), or r first and then a count of scores >= r − tol. On the H200 the count was
    faster for the stabilized forward at d 64 and slower at d 128 and when instrumenting
    (docs/kernel-performance.md), hence the choice by head dim.
    """
    if (SOFTMAX == _STABILIZED) and (not INSTRUMENT) and (HEAD_DIM <= 64):
        r = tl.max(x, 1)
        tied = (count_at_least(x, r - tie_tol, INTERPRET) >= 2) & (r > float("-inf"))
    elif (SOFTMAX == _STABILIZED) or INSTRUMENT:
        r, second = top2(x)
        tied = (second >= r - tie_tol) & (r > float("-inf"))
    else:
        r = tl.max(x, 1)
        tied = r > 0  # unused
    return r, tied


@triton.jit
def _record_tile(row_max, tie_events, r, tied):
    """Instrumentation per logical tile: the row max logit and one tie event per tied tile."""
    return tl.maximum(row_max, r), tie_events + tied.to(tl.int32)


@triton.jit
def _accumulate(acc, pv, alpha, LOW: tl.constexpr, INTERPRET: tl.constexpr):
    """Semantics step 7 for accumulator bf16 (fp32 accumulators fold alpha into the dot)."""
    return rnd(rnd(acc * alpha[:, None], LOW, INTERPRET) + rnd(pv, LOW, INTERPRET), LOW, INTERPRET)


@triton.jit
def _running_l(l_i, l_tile, alpha, L_LOW: tl.constexpr, LOW: tl.constexpr,
               INTERPRET: tl.constexpr):  # fmt: skip
    """Semantics step 7 for ℓ: one rounding of the update when the running ℓ is low."""
    l_i = l_i * alpha + l_tile
    if L_LOW:
        l_i = rnd(l_i, LOW, INTERPRET)
    return l_i


@triton.jit
def _fwd_one_pass(
    acc, l_i, m_i, row_max, tie_events, p_ones,
    q, k_src, v_src, stride_kn, stride_vn, offs_m, start_n, end_n, N,
    scale, qk_scale, tie_tol, beta,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
    SCORE_LOW: tl.constexpr, SOFTMAX: tl.constexpr, P_LOW: tl.constexpr, ACC_LOW: tl.constexpr,
    L_LOW: tl.constexpr, L_FROM_ROUNDED: tl.constexpr, ROW_SUM_FLOOR: tl.constexpr,
    INSTRUMENT: tl.constexpr, INTERPRET: tl.constexpr, LOW: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Key tiles [start_n, end_n), each BLOCK_N wide and one logical tile of the spec."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start in range(start_n, end_n, BLOCK_N):
        s_raw, x = _scores(q, k_src, stride_kn, offs_m, start, offs_d, N, scale, qk_scale,
                           BLOCK_N, MASKED, CAUSAL, SCORE_LOW, LOW, TMA, INTERPRET)  # fmt: skip
        r, tied = _tile_max_and_tie(x, tie_tol, SOFTMAX, INSTRUMENT, HEAD_DIM, INTERPRET)
        m_new = _tile_running_max(m_i, r, tied, beta, SOFTMAX)
        p = _p_bar(s_raw, x, m_new, qk_scale, SOFTMAX)
        alpha = tl.exp2(m_i - m_new)
        l_tile = _floor_tile_l(_tile_l(p, P_LOW, L_FROM_ROUNDED, LOW, INTERPRET), r, ROW_SUM_FLOOR)
        v = head_rows(v_src, start, offs_d, stride_vn, N, BLOCK_N, MASKED, TMA)
        if ACC_LOW:
            pv = dot_maybe_low(p, v, None, P_LOW, LOW, INTERPRET)
            acc = _accumulate(acc, pv, alpha, LOW, INTERPRET)
        else:
            acc = dot_maybe_low(p, v, acc * alpha[:, None], P_LOW, LOW, INTERPRET)
        l_i = _running_l(l_i, l_tile, alpha, L_LOW, LOW, INTERPRET)
        m_i = m_new
        if INSTRUMENT:
            row_max, tie_events = _record_tile(row_max, tie_events, r, tied)
            p_ones += count_ones(p, P_LOW, SOFTMAX == _FUSED_SCALE, LOW, INTERPRET)
    return acc, l_i, m_i, row_max, tie_events, p_ones


@triton.jit
def _fwd_two_pass(
    acc, l_i, m_i, row_max, tie_events, p_ones,
    q, k_src, v_src, stride_kn, stride_vn, offs_m, kv_end, tile_n, N,
    scale, qk_scale, tie_tol, beta,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    SCORE_LOW: tl.constexpr, SOFTMAX: tl.constexpr, P_LOW: tl.constexpr, ACC_LOW: tl.constexpr,
    L_LOW: tl.constexpr, L_FROM_ROUNDED: tl.constexpr, ROW_SUM_FLOOR: tl.constexpr,
    INSTRUMENT: tl.constexpr, INTERPRET: tl.constexpr, LOW: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Logical key tiles of `tile_n` keys (wider than BLOCK_N), each over BLOCK_N sub-tiles."""
    offs_d = tl.arange(0, HEAD_DIM)
    NEED_TIES: tl.constexpr = (SOFTMAX == _STABILIZED) or INSTRUMENT
    for tile_start in range(0, kv_end, tile_n):
        tile_end = tl.minimum(tile_start + tile_n, kv_end)
        # Pass 1: the tile's row max r and its second-largest score (with multiplicity), merged
        # over sub-tiles: the tie test of one big tile (see `top2`).
        r = tl.full([BLOCK_M], float("-inf"), tl.float32)
        second = tl.full([BLOCK_M], float("-inf"), tl.float32)
        for start in range(tile_start, tile_end, BLOCK_N):
            s_raw, x = _scores(q, k_src, stride_kn, offs_m, start, offs_d, N, scale, qk_scale,
                               BLOCK_N, True, CAUSAL, SCORE_LOW, LOW, TMA, INTERPRET)  # fmt: skip
            if NEED_TIES:
                r_sub, second_sub = top2(x)
                second = tl.maximum(tl.maximum(second, second_sub), tl.minimum(r, r_sub))
            else:
                r_sub = tl.max(x, 1)
            r = tl.maximum(r, r_sub)
        tied = (second >= r - tie_tol) & (r > float("-inf"))
        m_new = _tile_running_max(m_i, r, tied, beta, SOFTMAX)
        alpha = tl.exp2(m_i - m_new)
        # Pass 2: P̄ with the new running max; the tile's P̄V and ℓ summed in fp32.
        pv = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        l_tile = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start in range(tile_start, tile_end, BLOCK_N):
            s_raw, x = _scores(q, k_src, stride_kn, offs_m, start, offs_d, N, scale, qk_scale,
                               BLOCK_N, True, CAUSAL, SCORE_LOW, LOW, TMA, INTERPRET)  # fmt: skip
            p = _p_bar(s_raw, x, m_new, qk_scale, SOFTMAX)
            l_tile += _tile_l(p, P_LOW, L_FROM_ROUNDED, LOW, INTERPRET)
            v = head_rows(v_src, start, offs_d, stride_vn, N, BLOCK_N, True, TMA)
            pv = dot_maybe_low(p, v, pv, P_LOW, LOW, INTERPRET)
            if INSTRUMENT:
                p_ones += count_ones(p, P_LOW, SOFTMAX == _FUSED_SCALE, LOW, INTERPRET)
        if ACC_LOW:
            acc = _accumulate(acc, pv, alpha, LOW, INTERPRET)
        else:
            acc = acc * alpha[:, None] + pv
        l_tile = _floor_tile_l(l_tile, r, ROW_SUM_FLOOR)
        l_i = _running_l(l_i, l_tile, alpha, L_LOW, LOW, INTERPRET)
        m_i = m_new
        if INSTRUMENT:
            row_max, tie_events = _record_tile(row_max, tie_events, r, tied)
    return acc, l_i, m_i, row_max, tie_events, p_ones


@triton.jit
def attn_fwd_kernel(
    Q, K, V, Out, O32, LSE, ROW_MAX, TIE_EVENTS, P_ONES,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, GROUP, M, N, tile_n,
    scale, qk_scale, tie_tol, beta,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    TWO_PASS: tl.constexpr, CAUSAL: tl.constexpr, SCORE_LOW: tl.constexpr,
    SOFTMAX: tl.constexpr, P_LOW: tl.constexpr, ACC_LOW: tl.constexpr, L_LOW: tl.constexpr,
    L_FROM_ROUNDED: tl.constexpr, ROW_SUM_FLOOR: tl.constexpr, RELEASE_MASKED: tl.constexpr,
    ROW_SUM_BIAS: tl.constexpr,
    STORE_O32: tl.constexpr, INSTRUMENT: tl.constexpr, TMA: tl.constexpr,
    INTERPRET: tl.constexpr,
):  # fmt: skip
    """One program: BLOCK_M query rows of one (batch, head), over key/value head head // GROUP.

    Outputs: Out (input dtype), LSE (fp32, natural log) and, when asked, the fp32 Out before its
    rounding (STORE_O32) and per-row stats (INSTRUMENT). LSE, stats: [B·H, M] contiguous;
    Out and O32 share the strides `stride_o*` (their last dimension contiguous).
    `tie_tol` is the tie tolerance in log2 units (tolerance × LOG2E).
    """
    LOW: tl.constexpr = Q.dtype.element_ty
    start_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b, off_h = head_offsets(pid_bh, H)
    off_hkv = off_h // GROUP
    q_base = Q + off_b * stride_qb + off_h * stride_qh
    k_base = K + off_b * stride_kb + off_hkv * stride_kh
    v_base = V + off_b * stride_vb + off_hkv * stride_vh
    # K and V through tensor descriptors (TMA) or pointers: a launch choice, the same numerics.
    k_src = head_rows_source(k_base, stride_kn, N, BLOCK_N, HEAD_DIM, TMA)
    v_src = head_rows_source(v_base, stride_vn, N, BLOCK_N, HEAD_DIM, TMA)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = load_rows(q_base, offs_m, offs_d, stride_qm, M, True)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    tie_events = tl.zeros([BLOCK_M], dtype=tl.int32)
    p_ones = tl.zeros([BLOCK_M], dtype=tl.int32)

    # Keys past the causal diagonal of the tile's last row are masked for every row: skip them.
    if CAUSAL:
        kv_end = tl.minimum((start_m + 1) * BLOCK_M, N)
    else:
        kv_end = N

    if TWO_PASS:
        acc, l_i, m_i, row_max, tie_events, p_ones = _fwd_two_pass(
            acc, l_i, m_i, row_max, tie_events, p_ones,
            q, k_src, v_src, stride_kn, stride_vn, offs_m, kv_end, tile_n, N,
            scale, qk_scale, tie_tol, beta,
            HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, SCORE_LOW, SOFTMAX, P_LOW, ACC_LOW,
            L_LOW, L_FROM_ROUNDED, ROW_SUM_FLOOR, INSTRUMENT, INTERPRET, LOW, TMA,
        )  # fmt: skip
    else:
        # Full key tiles that no row of this query tile masks run without masks.
        full_tiles_end = (N // BLOCK_N) * BLOCK_N
        if CAUSAL:
            unmasked_end = tl.minimum((start_m * BLOCK_M) // BLOCK_N * BLOCK_N, full_tiles_end)
        else:
            unmasked_end = full_tiles_end
        acc, l_i, m_i, row_max, tie_events, p_ones = _fwd_one_pass(
            acc, l_i, m_i, row_max, tie_events, p_ones,
            q, k_src, v_src, stride_kn, stride_vn, offs_m, 0, unmasked_end, N,
            scale, qk_scale, tie_tol, beta,
            HEAD_DIM, BLOCK_N, False, CAUSAL, SCORE_LOW, SOFTMAX, P_LOW, ACC_LOW,
            L_LOW, L_FROM_ROUNDED, ROW_SUM_FLOOR, INSTRUMENT, INTERPRET, LOW, TMA,
        )  # fmt: skip
        acc, l_i, m_i, row_max, tie_events, p_ones = _fwd_one_pass(
            acc, l_i, m_i, row_max, tie_events, p_ones,
            q, k_src, v_src, stride_kn, stride_vn, offs_m, unmasked_end, kv_end, N,
            scale, qk_scale, tie_tol, beta,
            HEAD_DIM, BLOCK_N, True, CAUSAL, SCORE_LOW, SOFTMAX, P_LOW, ACC_LOW,
            L_LOW, L_FROM_ROUNDED, ROW_SUM_FLOOR, INSTRUMENT, INTERPRET, LOW, TMA,
        )  # fmt: skip

    if CAUSAL and RELEASE_MASKED:
        acc, l_i, m_i = _release_masked_tiles(
            acc, l_i, m_i, offs_m, start_m, N, tile_n, BLOCK_M, SOFTMAX, ACC_LOW, L_LOW,
            ROW_SUM_FLOOR, LOW, INTERPRET,
        )  # fmt: skip

    if ROW_SUM_BIAS != 0.0:  # an injected softmax-sum bias (a probe): ΣP − 1 = ROW_SUM_BIAS
        l_i = l_i / (1.0 + ROW_SUM_BIAS)
    # Epilogue (semantics step 8): divide in fp32, round once to the output dtype.
    o_fp32 = acc / l_i[:, None]
    row_ok = offs_m < M
    o_ptrs = off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(Out + o_ptrs, to_low(o_fp32, LOW, INTERPRET), mask=row_ok[:, None])
    if STORE_O32:
        tl.store(O32 + o_ptrs, o_fp32, mask=row_ok[:, None])
    row_ptrs = pid_bh.to(tl.int64) * M + offs_m
    tl.store(LSE + row_ptrs, (m_i + tl.log2(l_i)) / 1.4426950408889634, mask=row_ok)
    if INSTRUMENT:
        tl.store(ROW_MAX + row_ptrs, row_max / 1.4426950408889634, mask=row_ok)
        tl.store(TIE_EVENTS + row_ptrs, tie_events, mask=row_ok)
        tl.store(P_ONES + row_ptrs, p_ones, mask=row_ok)
