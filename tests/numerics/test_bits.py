"""Bit tools and the paper's worked example (arXiv:2510.04212 §3.3.2), derived from the bits."""

from __future__ import annotations

import struct
from fractions import Fraction

import pytest
import torch

from flashprobe.numerics.bits import (
    aligned_significand_sum,
    bf16_bits,
    bf16_rounding,
    fp32_bits,
    fp32_parts,
    round_to_bf16_exact,
    worked_example,
)

# What the paper prints (V4 §3.3.2); the code derives each of these from the inputs alone.
PAPER_SUM = "-10.01011010000111000101110"
PAPER_EXACT = -4.703990459442139
PAPER_BF16 = -4.71875
PAPER_ERROR = -0.014759540557861328
PAPER_FRACTION = "0010110"


def test_worked_example_matches_the_paper_bit_by_bit() -> None:
    w = worked_example()
    assert w.significand_sum == PAPER_SUM
    assert w.exact == PAPER_EXACT
    assert w.exact_is_fp32  # the fp32 add is exact: the bf16 rounding is the only one
    assert w.rounding.kept == PAPER_FRACTION
    assert w.rounding.round_bit == 1
    assert w.rounding.sticky_nonzero
    assert w.bf16 == PAPER_BF16
    assert w.error == PAPER_ERROR
    # the paper: |error| = half a bf16 ulp (2^-6 at this exponent) minus the residual
    assert w.half_ulp == 2.0**-6
    assert abs(w.error) == w.half_ulp - abs(w.residual)
    assert abs(w.residual + 0.00087) < 1e-5
    assert w.rounding.predicted_up and w.rounding.torch_up


def test_worked_example_bits_are_consistent_with_struct() -> None:
    w = worked_example()
    bits = fp32_bits(w.exact)
    fraction = f"{bits & ((1 << 23) - 1):023b}"
    assert w.exact_significand == "-1." + fraction
    assert w.rounding.kept + str(w.rounding.round_bit) + w.rounding.sticky == fraction
    assert (bits >> 23) & 0xFF == 127 + 2
    assert w.to_dict()["bit_rule_agrees_with_torch"]


def test_without_the_residual_the_tie_goes_to_even() -> None:
    # bf16 + bf16 with a carry and nothing below: an exact midpoint, ties-to-even decides
    w = worked_example(accumulator=-2.40625)
    assert w.rounding.round_bit == 1 and not w.rounding.sticky_nonzero
    assert w.rounding.rounded == -4.6875  # fraction 0010110 is even: rounds toward zero


def test_bf16_bit_rule_agrees_with_torch_on_random_floats() -> None:
    gen = torch.Generator().manual_seed(0)
    raw = torch.randint(0x00800000, 0x7F000000, (4000,), generator=gen, dtype=torch.int64)
    sign = torch.randint(0, 2, (4000,), generator=gen, dtype=torch.int64) << 31
    for pattern in (raw | sign).tolist():
        (x,) = struct.unpack(">f", struct.pack(">I", pattern))
        r = bf16_rounding(x)
        assert r.predicted_up == r.torch_up, x


def test_round_to_bf16_exact_is_one_rounding() -> None:
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(3000, generator=gen, dtype=torch.float64) * 8
    mid = base.to(torch.bfloat16).double()
    ulp = torch.ldexp(torch.ones_like(mid), torch.frexp(mid).exponent - 8)
    # near-midpoints are where a double rounding through fp32 goes wrong
    near = mid + ulp / 2 + torch.randn(3000, generator=gen, dtype=torch.float64) * ulp * 1e-9
    x = torch.cat([base, near])
    got = round_to_bf16_exact(x)
    for xi, gi in zip(x.tolist(), got.tolist(), strict=True):
        assert gi == _reference_bf16(xi), xi


def _reference_bf16(x: float) -> float:
    """Round-to-nearest-even to 8 significant bits with exact rationals."""
    if x == 0:
        return 0.0
    f = Fraction(x)
    m, e = abs(f), 0
    while m >= 2:
        m, e = m / 2, e + 1
    while m < 1:
        m, e = m * 2, e - 1
    scaled = m * 128
    q = int(scaled)
    rem = scaled - q
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and q % 2):
        q += 1
    out = float(Fraction(q, 128) * Fraction(2) ** e)
    return -out if x < 0 else out


def test_parts_and_validation() -> None:
    p = fp32_parts(-2.296875)
    assert (p.sign, p.exponent) == (1, 1)
    assert p.significand_str() == "-1.00100110000000000000000"
    assert bf16_bits(-2.296875) == 0xC013
    with pytest.raises(ValueError):
        fp32_bits(0.1)  # not an fp32 value
    with pytest.raises(ValueError):
        bf16_bits(-2.4071154594421387)  # fp32, not bf16
    with pytest.raises(ValueError):
        aligned_significand_sum(1.0, -1.5)
