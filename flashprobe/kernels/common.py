"""Small Triton helpers shared by the forward and backward kernels.

Every helper follows one rounding point of docs/semantics.md; the kernels call them so the
forward, the δ preprocess and the backward compute scores and P̄ the same way.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = 1.4426950408889634

# Softmax modes as kernel constants (KernelSpec.softmax).
SOFTMAX_STANDARD = 0
SOFTMAX_STABILIZED = 1
SOFTMAX_FUSED_SCALE = 2


@triton.jit
def head_offsets(pid_bh, H):
    """(batch, head) of program axis `pid_bh` = batch·H + head, as int64 for pointer math."""
    return (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)


@triton.jit
def load_rows(base, offs_rows, offs_d, stride_row, n_rows, MASK: tl.constexpr):
    """Load a [rows, HEAD_DIM] tile; rows past `n_rows` read as zeros when MASK."""
    ptrs = base + offs_rows[:, None] * stride_row + offs_d[None, :]
    if MASK:
        return tl.load(ptrs, mask=offs_rows[:, None] < n_rows, other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def head_rows(src, start, offs_d, stride_row, n_rows, BLOCK: tl.constexpr, MASK: tl.constexpr,
             TMA: tl.constexpr):  # fmt: skip
    """Rows [start, start + BLOCK) of one head's Q, K, V or dO: through a tensor descriptor
    (TMA, the Hopper copy engine; rows past the descriptor's `n_rows` read as zeros, as
    `load_rows` masked) or through pointers. The same values either way."""
    if TMA:
        return src.load([start, 0])
    else:
        return load_rows(src, start + tl.arange(0, BLOCK), offs_d, stride_row, n_rows, MASK)


@triton.jit
def head_rows_source(base, stride_row, n_rows, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr,
                     TMA: tl.constexpr):  # fmt: skip
    """What `head_rows` reads one head's [n_rows, HEAD_DIM] rows (starting at `base`) from: a
    device-side tensor descriptor of BLOCK-row boxes (TMA), or the base pointer itself."""
    if TMA:
        return tl.make_tensor_descriptor(base, [n_rows, HEAD_DIM], [stride_row, 1],
                                         [BLOCK, HEAD_DIM])  # fmt: skip
    else:
        return base


@triton.jit
def causal_valid(offs_rows, offs_cols, n_cols, CAUSAL: tl.constexpr):
    """[rows, cols] mask of scores that exist: key index < n_cols and, causal, key <= query."""
    valid = offs_cols[None, :] < n_cols
    if CAUSAL:
        valid = valid & (offs_cols[None, :] <= offs_rows[:, None])
    return valid


@triton.jit
def _top2_combine(a_first, a_second, b_first, b_second):
    return (
        tl.maximum(a_first, b_first),
        tl.maximum(tl.minimum(a_first, b_first), tl.maximum(a_second, b_second)),
    )


@triton.jit
def top2(x):
    """Per row of `x`, the largest and the second-largest entry (counted with multiplicity).

    "More than one score within tol of the max" is then exactly `second >= first - tol`: one
    reduction that also yields the row max, where counting would add a compare, a select and
    an add per score to a softmax that is already ALU-bound. Neighbouring columns (held by one
    thread) are ordered first, so the reduction starts from (max, min) pairs rather than from
    (x, −inf) pairs, whose −inf the compiler cannot fold away.
    """
    a, b = tl.split(tl.reshape(x, [x.shape[0], x.shape[1] // 2, 2]))
    return tl.reduce((tl.maximum(a, b), tl.minimum(a, b)), 1, _top2_combine)


@triton.jit
def count_at_least(x, threshold, INTERPRET: tl.constexpr):
    """Per row of the fp32 tile `x` (at most 511 columns): how many entries are >= `threshold`
    (one value per row). NaN entries do not count.

    On the GPU each compare is one FSET writing 1.0f or 0.0f, and the float bit patterns are
    summed as int32 (three-input integer adds): n·0x3F800000 = n·127·2^23, which wraps mod 2^32
    but leaves n·127 mod 512 in bits 23..31, and 383·127 ≡ 1 (mod 512) gives n back for
    n < 512. That is 1.5 instructions per entry where a compare, a select and an add take three.
    """
    if INTERPRET:
        return tl.sum((x >= threshold[:, None]).to(tl.int32), 1)
    else:
        bound = tl.broadcast_to(threshold[:, None], x.shape)
        ones = tl.inline_asm_elementwise("set.ge.f32.f32 $0, $1, $2;", "=f,f,f", [x, bound],
                                         dtype=tl.float32, is_pure=True, pack=1)  # fmt: skip
        bits = tl.sum(ones.to(tl.int32, bitcast=True), 1)
        return ((bits >> 23) * 383) & 511


@triton.jit
def count_ones(p, P_LOW: tl.constexpr, FUSED: tl.constexpr, LOW: tl.constexpr,
               INTERPRET: tl.constexpr):  # fmt: skip
    """Per row of the fp32 P̄ tile `p`: how many entries are exactly 1 as the P̄V product sees
    them (after the rounding to LOW when P_LOW), decided on fp32 `p` itself.

    Rounded to nearest even with `mant` stored mantissa bits, p becomes 1 exactly when
    1 - 2^-(mant+2) <= p <= 1 + 2^-(mant+1) (both midpoints round to 1, the even neighbour).
    Only the fused exponent can exceed 1 (by its rounding residual), so only it needs the upper
    bound; otherwise p <= 1 and "p is 1" is "p >= the lower bound", a single compare
    (`count_at_least`; docs/kernel-performance.md has the instruction counts).
    """
    mant: tl.constexpr = LOW.fp_mantissa_width
    if FUSED:
        if P_LOW:
            is_one = (p >= 1.0 - 2.0 ** -(mant + 2)) & (p <= 1.0 + 2.0 ** -(mant + 1))
        else:
            is_one = p == 1.0
        return tl.sum(is_one.to(tl.int32), 1)
    else:
        lower: tl.constexpr = 1.0 - 2.0 ** -(mant + 2) if P_LOW else 1.0
        return count_at_least(p, tl.full([p.shape[0]], lower, tl.float32), INTERPRET)


@triton.jit
def rnd(x, LOW: tl.constexpr, INTERPRET: tl.constexpr):
    """Round an fp32 tensor to the 16-bit input dtype (round-to-nearest-even), back to fp32.

    Under the interpreter fp32 → bf16 casts truncate, so there bf16 rounding is done on the bits.
    """
    if INTERPRET and LOW.primitive_bitwidth == 16 and LOW.fp_mantissa_width == 7:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16  # RNE at 8 significant bits
        return bits.to(tl.float32, bitcast=True)
    else:
        return x.to(LOW).to(tl.float32)


@triton.jit
def to_low(x, LOW: tl.constexpr, INTERPRET: tl.constexpr):
    """Cast an fp32 tensor to the 16-bit dtype with round-to-nearest-even (see `rnd`)."""
    if INTERPRET:
        return rnd(x, LOW, INTERPRET).to(LOW)  # exact: the value is representable already
    else:
        return x.to(LOW)


@triton.jit
def dot_low(a, b, acc, INTERPRET: tl.constexpr):
    """a @ b (+ acc) for 16-bit operands: exact products, fp32 accumulation.

    Under the interpreter the operands go through fp32 IEEE dots instead: Triton 3.9's
    interpreter returns garbage for bf16 tl.dot, and 16-bit products are exact in fp32 anyway.
    """
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def dot_f32(a, b, acc, LOW: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b (+ acc) for an fp32 `a` (P̄ or dS kept in fp32) and a 16-bit `b` (V, dO, Q, K):
    exact products, fp32 accumulation, never TF32.

    With bf16 `b` on the GPU, `a` is split into three bf16 pieces whose sum is exactly `a`
    (round-to-nearest leaves at most 15, then 6 significant bits: 8 + 8 + 8 cover fp32's 24;
    for |a| < 2^-110 the smallest piece is subnormal and may lose bits, an error under 2^-133)
    and three bf16 tensor-core dots accumulate the exact products in fp32, smallest piece first:
    an fp32 dot's numerics in another summation order, at tensor-core speed instead of one FMA
    per product. fp16 (whose exponent range cannot hold the small pieces) and the interpreter
    run the IEEE fp32 dot.
    """
    if INTERPRET or LOW.fp_mantissa_width != 7:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        hi = a.to(tl.bfloat16)
        rest = a - hi.to(tl.float32)
        mid = rest.to(tl.bfloat16)
        lo = (rest - mid.to(tl.float32)).to(tl.bfloat16)
        acc = tl.dot(lo, b, acc)
        acc = tl.dot(mid, b, acc)
        return tl.dot(hi, b, acc)


@triton.jit
def dot_maybe_low(a, b, acc, ROUND_A: tl.constexpr, LOW: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b with `a` rounded to the 16-bit dtype (ROUND_A) or kept in fp32 (`dot_f32`)."""
    if ROUND_A:
        return dot_low(to_low(a, LOW, INTERPRET), b, acc, INTERPRET)
    else:
        return dot_f32(a, b, acc, LOW, INTERPRET)


@triton.jit
def scores_log2(s_raw, scale, qk_scale, SCORE_LOW: tl.constexpr, LOW: tl.constexpr,
                INTERPRET: tl.constexpr):  # fmt: skip
    """Scores in log2 units (semantics step 1): fp32 multiply, or bf16 S then × LOG2E."""
    if SCORE_LOW:
        return rnd(s_raw * scale, LOW, INTERPRET) * 1.4426950408889634
    else:
        return s_raw * qk_scale
