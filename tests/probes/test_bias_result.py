"""The verdict: read off the excess over ideal rounding, significant and not negligible."""

from __future__ import annotations

import pytest

from flashprobe.probes.bias_result import verdict


@pytest.mark.parametrize(
    ("t", "mean", "share", "sign", "want"),
    [
        (1.6, 3e-6, 0.001, -1.0, "no bias beyond rounding"),
        (40.0, 3e-6, 0.001, -1.0, "no bias beyond rounding"),  # significant but negligible
        (-4.9, -6e-4, -0.16, -1.0, "no bias beyond rounding"),  # sizeable but not significant
        (-11.0, -6e-4, -0.16, -1.0, "biased away from zero"),
        (11.0, 6e-4, 0.16, -1.0, "biased toward zero"),
        (11.0, 6e-4, 0.16, 1.0, "biased away from zero"),
        (-11.0, -6e-4, -0.16, 0.0, "biased negative"),
    ],
)
def test_verdict_rule(t: float, mean: float, share: float, sign: float, want: str) -> None:
    assert verdict(t, mean, share, sign) == want
    assert verdict(t, mean, share, sign, exact=True) == "ideal rounding"
