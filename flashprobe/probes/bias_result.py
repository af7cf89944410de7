"""One variant's measured error, and the verdict read off it (`VERDICT_METHOD`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from flashprobe.probes.bias_config import EXACT
from flashprobe.spec import KernelSpec

#: |t| at or above this counts as a significant one-sided error in the verdict column.
T_SIGNIFICANT = 5.0
#: ... and the mean excess must also be at least this share of the mean |error| that ideal
#: rounding makes on the same rows: with enough rows a t test flags differences far below a
#: bf16 ulp (fa2's fp32 acc/ℓ rounded to bf16 differs from the fp64 O rounded to bf16 by
#: ~0.1% of that, t 2-5 over 1024 rows).
EXCESS_SHARE_MIN = 0.05
#: A row counts as shrunk when |O| is below this share of |exact O| (row_sum_floor's clamp).
SHRUNK_BELOW = 0.5
#: |ΣP − 1| below this is fp32 arithmetic, not a normalisation bias worth a note.
ROWSUM_FLOOR = 1e-6

T_METHOD = (
    "t = mean(e_r) / (std(e_r) / sqrt(rows)), e_r = mean error of row r over head_dim "
    "(elements of a row share P̄, so rows are the independent samples)"
)
VERDICT_METHOD = (
    "read off the excess e = O − bf16(fp64 O), what the kernel adds to ideal rounding: "
    f"biased when |t excess| >= {T_SIGNIFICANT:g} and |mean e| >= {EXCESS_SHARE_MIN:.0%} of "
    "the mean |error| of ideal rounding on the same rows (column excess/rnd), away from or "
    "toward zero by the sign of mean e against --v-mean's (positive/negative when it is 0); "
    "else 'no bias beyond rounding'; 'exact' is ideal rounding itself"
)


@dataclass(frozen=True)
class VariantResult:
    """Signed error of O (emulated − fp64) over rows × head_dim elements for one variant."""

    name: str
    spec: KernelSpec | None  # None: `exact`, the fp64 O rounded once to bf16
    ties: int
    v_mean: float
    tail_v_mean: float
    mean_error: float
    std_error: float  # over all elements
    row_mean_std: float  # std of the per-row mean errors
    t_stat: float  # over per-row means (elements of a row share P̄)
    frac_negative: float
    frac_zero: float
    frac_away: float | None  # errors with the sign of v_mean (None for v_mean = 0)
    away_from_zero: float | None  # mean_error · sign(v_mean)
    mean_abs_error: float
    excess_mean: float  # mean of (O − bf16(exact O)): what the kernel adds to ideal rounding
    excess_t_stat: float
    excess_share: float  # excess_mean / mean |bf16(exact O) − exact O| (ideal rounding's error)
    p_bar_ones_per_row: float | None
    tie_events_per_row: float | None
    verdict: str
    rowsum_mean: float | None = None  # mean over rows of ΣP − 1 (P recomputed from lse)
    rowsum_t: float | None = None  # t over rows
    shrunk_rows: float = 0.0  # fraction of rows with |O| < SHRUNK_BELOW·|exact O|

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["spec"] = None if self.spec is None else self.spec.to_dict()
        out["label"] = EXACT if self.spec is None else self.spec.describe()
        return out


def is_biased(excess_t: float, excess_share: float) -> bool:
    """The excess is one-sided (t) and not negligible next to ideal rounding (share)."""
    return abs(excess_t) >= T_SIGNIFICANT and abs(excess_share) >= EXCESS_SHARE_MIN


def direction(mean: float, sign: float) -> str:
    """Which way a mean error points: against the sign of V's mean, or plain +/− for V mean 0."""
    if sign == 0:
        return "positive" if mean > 0 else "negative"
    return "away from zero" if mean * sign > 0 else "toward zero"


def verdict(
    excess_t: float, excess_mean: float, excess_share: float, sign: float, *, exact: bool = False
) -> str:
    """The verdict column (VERDICT_METHOD): read off the excess over ideal rounding only."""
    if exact:
        return "ideal rounding"
    if not is_biased(excess_t, excess_share):
        return "no bias beyond rounding"
    return "biased " + direction(excess_mean, sign)
