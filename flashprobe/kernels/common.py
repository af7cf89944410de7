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
def dot_f32(a, b, acc):
    """a @ b (+ acc) in full IEEE fp32 (never TF32): for fp32 P̄ or dS operands."""
    return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")


@triton.jit
def dot_maybe_low(a, b, acc, ROUND_A: tl.constexpr, LOW: tl.constexpr, INTERPRET: tl.constexpr):
    """a @ b with `a` rounded to the 16-bit dtype (ROUND_A) or kept in fp32 (IEEE dot)."""
    if ROUND_A:
        return dot_low(to_low(a, LOW, INTERPRET), b, acc, INTERPRET)
    else:
        return dot_f32(a, b, acc)


@triton.jit
def scores_log2(s_raw, scale, qk_scale, SCORE_LOW: tl.constexpr, LOW: tl.constexpr,
                INTERPRET: tl.constexpr):  # fmt: skip
    """Scores in log2 units (semantics step 1): fp32 multiply, or bf16 S then × LOG2E."""
    if SCORE_LOW:
        return rnd(s_raw * scale, LOW, INTERPRET) * 1.4426950408889634
    else:
        return s_raw * qk_scale
