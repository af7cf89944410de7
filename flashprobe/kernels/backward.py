"""Backward flash-attention kernels: the δ preprocess and one dK/dV + dQ kernel.

FlashAttention-2's schedule as in the Triton tutorial: program `i` computes dK and dV for key
block `i` (looping over query blocks) and dQ for query block `i` (looping over key blocks), so no
atomics are needed and the result is deterministic. Under a causal mask the two jobs of one
program together cost the same for every program. Block sizes here only change the order of
fp32 additions (docs/semantics.md, backward).

ATOMIC_DQ (opt-in, launch option `dq_accumulation="atomic"`): the key-block loop also computes
each tile's share of dQ, dS·K, and adds it with fp32 atomics into a [B, H, M, D] buffer; the
launcher then scales and rounds it. 5 matrix products per block pair instead of 7, at the price
of an fp32 summation order of dQ that changes from run to run.

Rounding points (docs/semantics.md, backward): P recomputed from the saved lse in fp32;
dV += rnd_p(P)ᵀ dO; dP = dO Vᵀ; dS = P (dP − δ) with the unrounded P; dS rounded or not before
dQ = scale·dS K and dK = scale·dSᵀ Q; score rounding passed straight through.

δ sources: o_lowp (stored 16-bit O), o_fp32 (the forward's fp32 O), o_recompute (O' = P V in
fp32 over key tiles) and dp_p (rowsum(P ∘ dP) over key tiles); then optionally rounded.

The inner loops' Q, dO, K and V tiles come through pointers or, where the launch config asks
(`tuning.BwdConfig.tma`), through device-side tensor descriptors (TMA): the same values.

The interpreter work-arounds of `flashprobe.kernels.forward` (INTERPRET: 16-bit dots run as
exact fp32 IEEE dots, bf16 rounding done on the bits, under TRITON_INTERPRET=1) apply here too.
"""

from __future__ import annotations

import triton
import triton.language as tl

from flashprobe.kernels.common import (
    causal_valid,
    dot_f32,
    dot_low,
    dot_maybe_low,
    head_offsets,
    head_rows,
    head_rows_source,
    load_rows,
    rnd,
    scores_log2,
    to_low,
)

DELTA_O_LOWP = 0
DELTA_O_FP32 = 1
DELTA_O_RECOMPUTE = 2
DELTA_DP_P = 3
#: Not a δ: ΣP − 1 per row of the P the backward recomputes (instrumented training's check).
SUM_P_ERROR = 4


@triton.jit
def _probabilities(s_raw, lse_log2, scale, qk_scale, SCORE_LOW: tl.constexpr,
                   FUSED: tl.constexpr, LOW: tl.constexpr, ROW_AXIS: tl.constexpr,
                   INTERPRET: tl.constexpr):  # fmt: skip
    """Semantics backward step 2: P = exp2(x − lse·LOG2E) (or the fused FMA form).

    ROW_AXIS is the axis of `s_raw` that indexes queries (0: [M, N] tiles, 1: transposed).
    """
    if ROW_AXIS == 0:
        lse_b = lse_log2[:, None]
    else:
        lse_b = lse_log2[None, :]
    if FUSED:
        return tl.exp2(tl.fma(s_raw, qk_scale, -lse_b))
    else:
        return tl.exp2(scores_log2(s_raw, scale, qk_scale, SCORE_LOW, LOW, INTERPRET) - lse_b)


@triton.jit
def attn_bwd_preprocess_kernel(
    Out, O32, DO, DELTA, Q, K, V, LSE,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, GROUP, M, N, scale, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SOURCE: tl.constexpr, CAUSAL: tl.constexpr, SCORE_LOW: tl.constexpr, FUSED: tl.constexpr,
    DELTA_LOW: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """δ for BLOCK_M query rows of one (batch, head); Out, O32 and DO share strides stride_o*;
    K and V are read at key/value head head // GROUP.

    SOURCE 4 (SUM_P_ERROR) writes ΣP − 1 instead, from Q, K and LSE only.
    """
    LOW: tl.constexpr = Q.dtype.element_ty
    start_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b, off_h = head_offsets(pid_bh, H)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < M
    o_offs = off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    if SOURCE != 4:
        do = tl.load(DO + o_offs, mask=row_ok[:, None], other=0.0)
    if SOURCE == 0:  # o_lowp
        o = tl.load(Out + o_offs, mask=row_ok[:, None], other=0.0).to(tl.float32)
        delta = tl.sum(do.to(tl.float32) * o, 1)
    elif SOURCE == 1:  # o_fp32
        o = tl.load(O32 + o_offs, mask=row_ok[:, None], other=0.0)
        delta = tl.sum(do.to(tl.float32) * o, 1)
    else:  # recompute from P over key tiles
        row_ptrs = pid_bh.to(tl.int64) * M + offs_m
        lse_log2 = tl.load(LSE + row_ptrs, mask=row_ok, other=0.0) * 1.4426950408889634
        q = load_rows(Q + off_b * stride_qb + off_h * stride_qh, offs_m, offs_d, stride_qm, M, True)
        k_base = K + off_b * stride_kb + (off_h // GROUP) * stride_kh
        v_base = V + off_b * stride_vb + (off_h // GROUP) * stride_vh
        if CAUSAL:
            kv_end = tl.minimum((start_m + 1) * BLOCK_M, N)
        else:
            kv_end = N
        o_acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        delta = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start_n in range(0, kv_end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            k = load_rows(k_base, offs_n, offs_d, stride_kn, N, True)
            s_raw = dot_low(q, tl.trans(k), None, INTERPRET)
            p = _probabilities(
                s_raw, lse_log2, scale, qk_scale, SCORE_LOW, FUSED, LOW, 0, INTERPRET
            )
            p = tl.where(causal_valid(offs_m, offs_n, N, CAUSAL), p, 0.0)
            if SOURCE == 2:  # o_recompute: O' = P V in fp32
                v = load_rows(v_base, offs_n, offs_d, stride_vn, N, True)
                o_acc = dot_f32(p, v, o_acc, LOW, INTERPRET)
            elif SOURCE == 3:  # dp_p: sum_j P ∘ dP with dP = dO Vᵀ
                v = load_rows(v_base, offs_n, offs_d, stride_vn, N, True)
                dp = dot_low(do, tl.trans(v), None, INTERPRET)
                delta += tl.sum(p * dp, 1)
            else:  # ΣP
                delta += tl.sum(p, 1)
        if SOURCE == 2:
            delta = tl.sum(do.to(tl.float32) * o_acc, 1)
        elif SOURCE == 4:
            delta = delta - 1.0
    if DELTA_LOW:
        delta = rnd(delta, LOW, INTERPRET)
    tl.store(DELTA + pid_bh.to(tl.int64) * M + offs_m, delta, mask=row_ok)


@triton.jit
def _bwd_dkdv(
    dk, dv, k, v, q_src, do_src, lse_base, delta_base, dq_base, stride_qm, stride_dom,
    stride_dqm, offs_n, start_m, end_m, M, N, scale, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
    SCORE_LOW: tl.constexpr, FUSED: tl.constexpr, P_LOW: tl.constexpr, DS_LOW: tl.constexpr,
    ATOMIC_DQ: tl.constexpr, KEY_MASK: tl.constexpr, TMA: tl.constexpr, INTERPRET: tl.constexpr,
    LOW: tl.constexpr,
):  # fmt: skip
    """Accumulate dK, dV of one key block over query blocks [start_m, end_m), transposed tiles;
    with ATOMIC_DQ also add each query block's dS·K (unscaled) to the fp32 dQ at `dq_base`.

    Without MASKED every query row is < M and sees every key of the block (rows of keys past N
    only reach rows of dK, dV that are never stored). dQ sees every key of the block, so there
    P of keys past N must be 0 (KEY_MASK, set when N is not a multiple of the block): their K
    rows are 0, but P may be inf when lse < −88, and inf · 0 is NaN.
    """
    offs_d = tl.arange(0, HEAD_DIM)
    for start in range(start_m, end_m, BLOCK_M):
        offs_m = start + tl.arange(0, BLOCK_M)
        q = head_rows(q_src, start, offs_d, stride_qm, M, BLOCK_M, MASKED, TMA)
        do = head_rows(do_src, start, offs_d, stride_dom, M, BLOCK_M, MASKED, TMA)
        if MASKED:
            row_ok = offs_m < M
            lse = tl.load(lse_base + offs_m, mask=row_ok, other=0.0)
            delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        else:
            lse = tl.load(lse_base + offs_m)
            delta = tl.load(delta_base + offs_m)
        s_raw_t = dot_low(k, tl.trans(q), None, INTERPRET)  # [BLOCK_N, BLOCK_M]
        p_t = _probabilities(s_raw_t, lse * 1.4426950408889634, scale, qk_scale,
                             SCORE_LOW, FUSED, LOW, 1, INTERPRET)  # fmt: skip
        if MASKED:
            valid = row_ok[None, :]
            if CAUSAL:
                valid = valid & (offs_m[None, :] >= offs_n[:, None])
            if KEY_MASK:
                valid = valid & (offs_n[:, None] < N)
            p_t = tl.where(valid, p_t, 0.0)
        elif KEY_MASK:
            p_t = tl.where(offs_n[:, None] < N, p_t, 0.0)
        dv = dot_maybe_low(p_t, do, dv, P_LOW, LOW, INTERPRET)
        dp_t = dot_low(v, tl.trans(do), None, INTERPRET)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = dot_maybe_low(ds_t, q, dk, DS_LOW, LOW, INTERPRET)
        if ATOMIC_DQ:
            # This key block's share of dQ, with dS rounded (DS_LOW) as the ordered dQ loop
            # rounds it; relaxed: only the sum matters, read after the kernel ends.
            dq = dot_maybe_low(tl.trans(ds_t), k, None, DS_LOW, LOW, INTERPRET)
            dq_ptrs = dq_base + offs_m[:, None] * stride_dqm + offs_d[None, :]
            if MASKED:
                tl.atomic_add(dq_ptrs, dq, mask=row_ok[:, None], sem="relaxed")
            else:
                tl.atomic_add(dq_ptrs, dq, sem="relaxed")
    return dk, dv


@triton.jit
def _bwd_dq(
    dq, q, do, lse_log2, delta, k_src, v_src, stride_kn, stride_vn,
    offs_m, start_n, end_n, N, scale, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
    SCORE_LOW: tl.constexpr, FUSED: tl.constexpr, DS_LOW: tl.constexpr, TMA: tl.constexpr,
    INTERPRET: tl.constexpr, LOW: tl.constexpr,
):  # fmt: skip
    """Accumulate dQ of one query block over key blocks [start_n, end_n)."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start in range(start_n, end_n, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        k = head_rows(k_src, start, offs_d, stride_kn, N, BLOCK_N, MASKED, TMA)
        v = head_rows(v_src, start, offs_d, stride_vn, N, BLOCK_N, MASKED, TMA)
        s_raw = dot_low(q, tl.trans(k), None, INTERPRET)
        p = _probabilities(s_raw, lse_log2, scale, qk_scale, SCORE_LOW, FUSED, LOW, 0, INTERPRET)
        if MASKED:
            p = tl.where(causal_valid(offs_m, offs_n, N, CAUSAL), p, 0.0)
        dp = dot_low(do, tl.trans(v), None, INTERPRET)
        ds = p * (dp - delta[:, None])
        dq = dot_maybe_low(ds, k, dq, DS_LOW, LOW, INTERPRET)
    return dq


@triton.jit
def attn_bwd_kernel(
    Q, K, V, DO, DQ, DK, DV, LSE, DELTA,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom,
    stride_dqb, stride_dqh, stride_dqm,
    stride_dkb, stride_dkh, stride_dkn,
    H, GROUP, M, N, scale, qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr,
    BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
    CAUSAL: tl.constexpr, SCORE_LOW: tl.constexpr, FUSED: tl.constexpr,
    P_LOW: tl.constexpr, DS_LOW: tl.constexpr, ATOMIC_DQ: tl.constexpr, KEY_MASK: tl.constexpr,
    TMA: tl.constexpr, INTERPRET: tl.constexpr,
):  # fmt: skip
    """Program i: dK, dV of key block i (BLOCK_N1 keys) and dQ of query block i (BLOCK_M2 rows).

    K and V are read at key/value head head // GROUP. DK and DV (per query head) share the
    strides stride_dk*; they are rounded to the input dtype, or stored unrounded when they are
    fp32 (grouped-query attention: the launcher sums a group's heads, then rounds once).
    LSE, DELTA: [B·H, M] contiguous.

    ATOMIC_DQ: DQ is a zeroed fp32 buffer that the key blocks add dS·K into (unscaled; no dQ
    loop, BLOCK_M2 and BLOCK_N2 unused, one program per key block); KEY_MASK when N is not a
    multiple of BLOCK_N1 (`_bwd_dkdv`).
    """
    LOW: tl.constexpr = Q.dtype.element_ty
    pid = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b, off_h = head_offsets(pid_bh, H)
    q_base = Q + off_b * stride_qb + off_h * stride_qh
    k_base = K + off_b * stride_kb + (off_h // GROUP) * stride_kh
    v_base = V + off_b * stride_vb + (off_h // GROUP) * stride_vh
    do_base = DO + off_b * stride_dob + off_h * stride_doh
    lse_base = LSE + pid_bh.to(tl.int64) * M
    delta_base = DELTA + pid_bh.to(tl.int64) * M
    dq_base = DQ + off_b * stride_dqb + off_h * stride_dqh
    offs_d = tl.arange(0, HEAD_DIM)
    # The inner loops' tiles through tensor descriptors (TMA) or pointers: a launch choice, the
    # same numerics. Each program's own key block and query block load once, through pointers.
    q_src = head_rows_source(q_base, stride_qm, M, BLOCK_M1, HEAD_DIM, TMA)
    do_src = head_rows_source(do_base, stride_dom, M, BLOCK_M1, HEAD_DIM, TMA)
    k_src = head_rows_source(k_base, stride_kn, N, BLOCK_N2, HEAD_DIM, TMA)
    v_src = head_rows_source(v_base, stride_vn, N, BLOCK_N2, HEAD_DIM, TMA)

    # -- dK, dV for key block pid ------------------------------------------------------------
    start_n = pid * BLOCK_N1
    if start_n < N:
        offs_n = start_n + tl.arange(0, BLOCK_N1)
        col_ok = offs_n < N
        k = load_rows(k_base, offs_n, offs_d, stride_kn, N, True)
        v = load_rows(v_base, offs_n, offs_d, stride_vn, N, True)
        dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
        full_rows_end = (M // BLOCK_M1) * BLOCK_M1
        if CAUSAL:
            # Query blocks crossing the diagonal need the mask; rows below it see every key.
            diag_start = (start_n // BLOCK_M1) * BLOCK_M1
            diag_end = tl.minimum(tl.cdiv(start_n + BLOCK_N1, BLOCK_M1) * BLOCK_M1, M)
            dk, dv = _bwd_dkdv(
                dk, dv, k, v, q_src, do_src, lse_base, delta_base, dq_base, stride_qm,
                stride_dom, stride_dqm, offs_n, diag_start, diag_end, M, N, scale, qk_scale,
                HEAD_DIM, BLOCK_M1, True, CAUSAL, SCORE_LOW, FUSED, P_LOW, DS_LOW, ATOMIC_DQ,
                KEY_MASK, TMA, INTERPRET, LOW,
            )  # fmt: skip
            middle_start = diag_end
        else:
            middle_start = 0
        middle_end = tl.maximum(full_rows_end, middle_start)
        dk, dv = _bwd_dkdv(
            dk, dv, k, v, q_src, do_src, lse_base, delta_base, dq_base, stride_qm,
            stride_dom, stride_dqm, offs_n, middle_start, middle_end, M, N, scale, qk_scale,
            HEAD_DIM, BLOCK_M1, False, CAUSAL, SCORE_LOW, FUSED, P_LOW, DS_LOW, ATOMIC_DQ,
            KEY_MASK, TMA, INTERPRET, LOW,
        )  # fmt: skip
        dk, dv = _bwd_dkdv(
            dk, dv, k, v, q_src, do_src, lse_base, delta_base, dq_base, stride_qm,
            stride_dom, stride_dqm, offs_n, middle_end, M, M, N, scale, qk_scale,
            HEAD_DIM, BLOCK_M1, True, CAUSAL, SCORE_LOW, FUSED, P_LOW, DS_LOW, ATOMIC_DQ,
            KEY_MASK, TMA, INTERPRET, LOW,
        )  # fmt: skip
        dkv_offs = (off_b * stride_dkb + off_h * stride_dkh + offs_n[:, None] * stride_dkn
                    + offs_d[None, :])  # fmt: skip
        if DK.dtype.element_ty == tl.float32:
            tl.store(DK + dkv_offs, dk * scale, mask=col_ok[:, None])
            tl.store(DV + dkv_offs, dv, mask=col_ok[:, None])
        else:
            tl.store(DK + dkv_offs, to_low(dk * scale, LOW, INTERPRET), mask=col_ok[:, None])
            tl.store(DV + dkv_offs, to_low(dv, LOW, INTERPRET), mask=col_ok[:, None])

    # -- dQ for query block pid (ATOMIC_DQ: added by the key blocks above instead) -----------
    start_m = pid * BLOCK_M2
    if not ATOMIC_DQ and start_m < M:
        offs_m = start_m + tl.arange(0, BLOCK_M2)
        row_ok = offs_m < M
        q = load_rows(q_base, offs_m, offs_d, stride_qm, M, True)
        do = load_rows(do_base, offs_m, offs_d, stride_dom, M, True)
        lse_log2 = tl.load(lse_base + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
        delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
        full_cols_end = (N // BLOCK_N2) * BLOCK_N2
        if CAUSAL:
            unmasked_end = tl.minimum(start_m // BLOCK_N2 * BLOCK_N2, full_cols_end)
            kv_end = tl.minimum(start_m + BLOCK_M2, N)
        else:
            unmasked_end = full_cols_end
            kv_end = N
        dq = _bwd_dq(
            dq, q, do, lse_log2, delta, k_src, v_src, stride_kn, stride_vn,
            offs_m, 0, unmasked_end, N, scale, qk_scale,
            HEAD_DIM, BLOCK_N2, False, CAUSAL, SCORE_LOW, FUSED, DS_LOW, TMA, INTERPRET, LOW,
        )  # fmt: skip
        dq = _bwd_dq(
            dq, q, do, lse_log2, delta, k_src, v_src, stride_kn, stride_vn,
            offs_m, unmasked_end, kv_end, N, scale, qk_scale,
            HEAD_DIM, BLOCK_N2, True, CAUSAL, SCORE_LOW, FUSED, DS_LOW, TMA, INTERPRET, LOW,
        )  # fmt: skip
        dq_offs = (off_b * stride_dqb + off_h * stride_dqh + offs_m[:, None] * stride_dqm
                   + offs_d[None, :])  # fmt: skip
        tl.store(DQ + dq_offs, to_low(dq * scale, LOW, INTERPRET), mask=row_ok[:, None])
