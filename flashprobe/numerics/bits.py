"""Bit-level views of fp32 and bf16 values: significands, round bit, sticky bits.

Everything here is derived from the actual IEEE bit patterns (via `struct` for fp32 and torch for
bf16), so the paper's worked example (arXiv:2510.04212 §3.3.2) can be checked bit by bit rather
than restated.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch

FP32_FRACTION_BITS = 23
BF16_FRACTION_BITS = 7
#: fp32 fraction bits that bf16 drops: 1 round bit + 15 sticky bits.
DROPPED_BITS = FP32_FRACTION_BITS - BF16_FRACTION_BITS


def fp32_bits(x: float) -> int:
    """The 32-bit pattern of `x` as fp32; raises if x is not exactly an fp32 value."""
    (bits,) = struct.unpack(">I", struct.pack(">f", x))
    (back,) = struct.unpack(">f", struct.pack(">I", bits))
    if back != x:
        raise ValueError(f"{x!r} is not exactly representable in fp32")
    return bits


def bf16_bits(x: float) -> int:
    """The 16-bit pattern of `x` as bf16 (via torch); raises if x is not exactly a bf16 value."""
    t = torch.tensor([x], dtype=torch.float64)
    b = t.to(torch.bfloat16)
    if float(b.to(torch.float64)) != x:
        raise ValueError(f"{x!r} is not exactly representable in bf16")
    return int(b.view(torch.int16).item()) & 0xFFFF


def to_fp32(x: float) -> float:
    """Round a Python float to fp32 (round-to-nearest-even) and return it as a float."""
    return float(torch.tensor([x], dtype=torch.float64).to(torch.float32).item())


def to_bf16(x: float) -> float:
    """Round a value to bf16 with torch's round-to-nearest-even, going through fp32 first."""
    return float(torch.tensor([to_fp32(x)], dtype=torch.float32).to(torch.bfloat16).item())


@dataclass(frozen=True)
class Fp32Parts:
    """An fp32 value split into fields; `significand` includes the implicit leading 1."""

    value: float
    sign: int
    exponent: int  # unbiased; normal numbers only
    fraction: int  # the 23 stored fraction bits

    @property
    def significand(self) -> int:
        return (1 << FP32_FRACTION_BITS) | self.fraction

    def significand_str(self) -> str:
        """Like the paper: '-1.0011010...' with all 23 fraction bits."""
        sign = "-" if self.sign else ""
        return f"{sign}1.{self.fraction:0{FP32_FRACTION_BITS}b}"


def fp32_parts(x: float) -> Fp32Parts:
    bits = fp32_bits(x)
    biased = (bits >> FP32_FRACTION_BITS) & 0xFF
    if biased in (0, 0xFF):
        raise ValueError(f"{x!r}: only normal fp32 numbers are decomposed")
    return Fp32Parts(
        value=x,
        sign=bits >> 31,
        exponent=biased - 127,
        fraction=bits & ((1 << FP32_FRACTION_BITS) - 1),
    )


@dataclass(frozen=True)
class Bf16Rounding:
    """How an fp32 value rounds to bf16, read off its bits.

    kept: the 7 fraction bits bf16 keeps; round_bit: the first dropped bit; sticky: the 15
    dropped bits after it. Round-to-nearest-even rounds up in magnitude iff round_bit is 1 and
    (sticky is nonzero or the last kept bit is 1).
    """

    value: float
    rounded: float
    kept: str
    round_bit: int
    sticky: str
    sticky_nonzero: bool
    predicted_up: bool  # magnitude grows, from the bits alone
    torch_up: bool  # magnitude grew, from torch's own conversion

    @property
    def error(self) -> float:
        return self.rounded - self.value


def bf16_rounding(x: float) -> Bf16Rounding:
    """Split fp32 `x` at the bf16 boundary and compare the bit rule with torch's rounding."""
    parts = fp32_parts(x)
    dropped = parts.fraction & ((1 << DROPPED_BITS) - 1)
    kept = parts.fraction >> DROPPED_BITS
    round_bit = dropped >> (DROPPED_BITS - 1)
    sticky = dropped & ((1 << (DROPPED_BITS - 1)) - 1)
    predicted_up = bool(round_bit and (sticky or (kept & 1)))
    rounded = to_bf16(x)
    return Bf16Rounding(
        value=x,
        rounded=rounded,
        kept=f"{kept:0{BF16_FRACTION_BITS}b}",
        round_bit=round_bit,
        sticky=f"{sticky:0{DROPPED_BITS - 1}b}",
        sticky_nonzero=sticky != 0,
        predicted_up=predicted_up,
        torch_up=abs(rounded) > abs(x),
    )


def aligned_significand_sum(a: float, b: float) -> str:
    """Sum of two same-sign fp32 values with equal exponents, before renormalisation.

    Returns the paper's notation: the carried significand ('-10.0101...') with the operands'
    23 fraction bits, i.e. what the adder holds before shifting out the round bit.
    """
    pa, pb = fp32_parts(a), fp32_parts(b)
    if pa.sign != pb.sign or pa.exponent != pb.exponent:
        raise ValueError("the aligned sum is defined here for same-sign, same-exponent operands")
    total = pa.significand + pb.significand
    whole, frac = total >> FP32_FRACTION_BITS, total & ((1 << FP32_FRACTION_BITS) - 1)
    sign = "-" if pa.sign else ""
    return f"{sign}{whole:b}.{frac:0{FP32_FRACTION_BITS}b}"


@dataclass(frozen=True)
class WorkedExample:
    """The paper's example: fp32 accumulator (bf16 value + residual) plus a bf16 addend."""

    accumulator_bf16: float
    accumulator: float  # fp32: the bf16 value plus a tiny same-sign residual
    addend: float
    residual: float
    exact: float
    exact_is_fp32: bool  # the fp32 add lost nothing: the only rounding is the bf16 one
    bf16: float
    error: float
    half_ulp: float
    accumulator_significand: str
    addend_significand: str
    significand_sum: str
    exact_significand: str
    rounding: Bf16Rounding

    def to_dict(self) -> dict[str, object]:
        r = self.rounding
        return {
            "accumulator_bf16": self.accumulator_bf16,
            "residual": self.residual,
            "accumulator_fp32": self.accumulator,
            "addend_bf16": self.addend,
            "exact": self.exact,
            "exact_is_fp32": self.exact_is_fp32,
            "bf16": self.bf16,
            "error": self.error,
            "half_ulp": self.half_ulp,
            # the paper: |error| = half a bf16 ulp minus the residual
            "half_ulp_minus_residual": self.half_ulp - abs(self.residual),
            "accumulator_exponent": fp32_parts(self.accumulator).exponent,
            "exact_exponent": fp32_parts(to_fp32(self.exact)).exponent,
            "accumulator_significand": self.accumulator_significand,
            "addend_significand": self.addend_significand,
            "significand_sum": self.significand_sum,
            "exact_significand": self.exact_significand,
            "bf16_fraction": r.kept,
            "round_bit": r.round_bit,
            "sticky_bits": r.sticky,
            "sticky_nonzero": r.sticky_nonzero,
            "rounds_away_from_zero": r.torch_up,
            "bit_rule_agrees_with_torch": r.predicted_up == r.torch_up,
        }


#: The inputs the paper states (V4 §3.3.2); every other number is derived.
PAPER_ACCUMULATOR_BF16 = -2.40625
PAPER_ACCUMULATOR_FP32 = -2.4071154594421387
PAPER_ADDEND_BF16 = -2.296875


def worked_example(
    accumulator_bf16: float = PAPER_ACCUMULATOR_BF16,
    accumulator: float = PAPER_ACCUMULATOR_FP32,
    addend: float = PAPER_ADDEND_BF16,
) -> WorkedExample:
    """Recompute the paper's example: fp32 add, then the one rounding to bf16."""
    bf16_bits(accumulator_bf16)  # validate the inputs are what the paper says they are
    bf16_bits(addend)
    acc = to_fp32(accumulator)
    fp32_bits(acc)
    exact = acc + addend  # float64: exact for two fp32 operands
    exact32 = to_fp32(exact)
    rounding = bf16_rounding(exact32)
    exp = fp32_parts(exact32).exponent
    return WorkedExample(
        accumulator_bf16=accumulator_bf16,
        accumulator=acc,
        addend=addend,
        residual=acc - accumulator_bf16,
        exact=exact,
        exact_is_fp32=exact32 == exact,
        bf16=rounding.rounded,
        error=rounding.rounded - exact,
        half_ulp=2.0 ** (exp - BF16_FRACTION_BITS - 1),
        accumulator_significand=fp32_parts(acc).significand_str(),
        addend_significand=fp32_parts(addend).significand_str(),
        significand_sum=aligned_significand_sum(acc, addend),
        exact_significand=fp32_parts(exact32).significand_str(),
        rounding=rounding,
    )


def round_to_bf16_exact(x: torch.Tensor) -> torch.Tensor:
    """fp64 → bf16 with ONE round-to-nearest-even, returned as fp64.

    torch converts fp64 to bf16 through fp32, rounding twice: a value just above a bf16
    midpoint can land exactly on it in fp32 and then tie to even, the wrong way. Rounding to
    fp32 with round-to-odd first (truncate, then set the last bit if anything was dropped)
    keeps that information, so the second rounding is correct. Normal fp32 range only.
    """
    x = x.to(torch.float64)
    f = x.to(torch.float32)
    # truncate toward zero: step back one fp32 ulp where RNE rounded up in magnitude
    up = f.to(torch.float64).abs() > x.abs()
    bits = f.view(torch.int32)
    bits = torch.where(up, bits - 1, bits)  # sign-magnitude: -1 shrinks |f| for either sign
    inexact = bits.view(torch.float32).to(torch.float64) != x
    bits = torch.where(inexact, bits | 1, bits)
    return bits.view(torch.float32).to(torch.bfloat16).to(torch.float64)
