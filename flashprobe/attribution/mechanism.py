"""Mechanism metrics of the paper's failure story (arXiv:2510.04212 §3), as pure functions.

Every function takes error tensors (variant minus the fp64 golden) and returns plain numbers:

    signed_error      mean and t-statistic of a signed error, t over per-row means (the elements
                      of one attention row share its P̄, so rows are the independent units; the
                      convention of probes.bias)
    relative_error    ‖approx − exact‖_F / ‖exact‖_F
    coherence         ‖Σ_t E_t‖ / Σ_t ‖E_t‖ over steps: 1 when every step's error points the same
                      way (the errors accumulate, paper Fig. 5a), ≈ 1/√T for independent errors
    top_direction     the top singular pair of one step's error and its share of the energy
    direction_similarity   |cos| of consecutive steps' top singular vectors (paper Claim 2:
                      "similar low-rank updates"; chance level for random d-vectors ≈ 1/√d)
    growth_exponent   slope of log |summed error| against log N over prefixes of the sequence:
                      ≈ 1 for a bias (the sum grows ∝ N), ≈ 0.5 for zero-mean noise (∝ √N)
    key_shift_leak    how far a dK breaks softmax's shift invariance (exactly 0 in exact
                      arithmetic), and whether the leak pushes the scores up or down
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from flashprobe.model.instrument import KeyGradStats

__all__ = [
    "ErrorSeries",
    "coherence",
    "cumulative",
    "direction_similarity",
    "growth_exponent",
    "key_shift_leak",
    "prefix_grid",
    "prefix_rms",
    "relative_error",
    "signed_error",
    "top_direction",
]


def signed_error(err: torch.Tensor) -> tuple[float, float]:
    """(mean, t) of a signed error whose last dimension is one row's elements; a 1-D or
    scalar-per-row error ([..., rows]) is passed with a trailing dimension of 1."""
    per_row = err.double().reshape(-1, err.shape[-1]).mean(dim=-1)
    mean = float(per_row.mean())
    n = per_row.numel()
    if n < 2:
        return mean, math.nan
    std = float(per_row.std())
    if std > 0:
        return mean, mean / (std / math.sqrt(n))
    return mean, 0.0 if mean == 0 else math.copysign(math.inf, mean)


def key_shift_leak(dk: torch.Tensor, q: torch.Tensor) -> tuple[float, float]:
    """(leak, drift) of one head's key gradient dk [..., N, D], queries q [..., M, D].

    Adding one vector u to every key adds q_i·u to every score of row i, which softmax ignores,
    so ∂L/∂u = Σ_j dK_j is exactly 0 and any nonzero column sum is numerical error: a gradient
    the loss cannot see. leak = ‖Σ_j dK_j‖ / ‖dK‖ (Frobenius over the leading dimensions);
    bf16 rounding of dK alone leaves about 1e-3. drift = cos(−Σ_j dK_j, mean_i q_i) pooled over
    the leading dimensions: > 0 when a descent step on the keys along the leak raises the rows'
    scores all together (max logit up, softmax unchanged). NaN where undefined.
    """

    def one_head(t: torch.Tensor) -> torch.Tensor:  # [..., N, D] → [batch, 1, N, D]
        return t.double().reshape(-1, 1, *t.shape[-2:])

    values = KeyGradStats.from_grads(one_head(dk), one_head(q)).to_dict()
    leak, drift = values["key_shift_leak"][0], values["key_shift_drift"][0]
    return (math.nan if leak is None else leak, math.nan if drift is None else drift)


@torch.no_grad()
def softmax_sum_record(
    q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor, spec: Any, *, causal: bool, scale: float
) -> dict[str, float | None]:
    """ΣP − 1 of one head's softmax as the backward recomputes it from the forward's lse (q, k
    [..., T, D], lse [..., T]; scores in IEEE fp32, rounded as the spec rounds them: 0 for an
    exact lse, > 0 where a bf16 running ℓ drops the tails), and where it sits: split by whether
    a row's largest rounded score is shared by two or more keys. A uniform injected bias
    (`row_sum_bias`) sits on every row alike.

        softmax_sum_bias, softmax_sum_t   mean and t over rows of ΣP − 1
        tied_rows                         the share of rows whose maximum is tied
        softmax_sum_bias_tied / _untied   mean ΣP − 1 over those rows / the others (None: none)
        softmax_sum_tied_share            Σ ΣP − 1 over tied rows / over all rows (None: Σ 0)
    """
    from flashprobe.numerics.rounding import low_dtype_for
    from flashprobe.reference.emulator_backward import row_max_ties, scores_qk, softmax_sum_error

    s = scores_qk(q, k, causal=causal)  # once, for both the sum and the ties
    low = low_dtype_for(q.dtype)
    err = softmax_sum_error(s, lse.float(), spec, scale=scale, causal=False, low_dtype=low)
    err = err.double().flatten()
    tied = row_max_ties(s, spec, scale=scale, low_dtype=low).flatten() >= 2
    mean = float(err.mean())
    sd = float(err.std()) if err.numel() > 1 else math.nan
    t = mean / (sd / math.sqrt(err.numel())) if sd > 0 else (0.0 if mean == 0 else math.nan)
    total = float(err.sum())
    return {
        "softmax_sum_bias": mean,
        "softmax_sum_t": t,
        "tied_rows": float(tied.double().mean()),
        "softmax_sum_bias_tied": float(err[tied].mean()) if tied.any() else None,
        "softmax_sum_bias_untied": float(err[~tied].mean()) if (~tied).any() else None,
        "softmax_sum_tied_share": float(err[tied].sum()) / total if total != 0 else None,
    }


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """Frobenius relative error; NaN when the exact value is zero."""
    diff = float(torch.linalg.vector_norm((approx.double() - exact.double()).flatten()))
    ref = float(torch.linalg.vector_norm(exact.double().flatten()))
    return diff / ref if ref > 0 else (0.0 if diff == 0 else math.nan)


def coherence(errors: Sequence[torch.Tensor]) -> float:
    """‖Σ_t E_t‖ / Σ_t ‖E_t‖ (Frobenius); NaN with no errors or only zero errors."""
    if not errors:
        return math.nan
    total = torch.zeros_like(errors[0], dtype=torch.float64)
    norms = 0.0
    for e in errors:
        total += e.double()
        norms += float(torch.linalg.vector_norm(e.double().flatten()))
    return float(torch.linalg.vector_norm(total.flatten())) / norms if norms > 0 else math.nan


def top_direction(error: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor, float]:
    """(u, v, share): the top singular vectors of a matrix error and σ₁² / ‖E‖²_F, the energy
    share of its best rank-1 approximation. A vector is its own direction (u None, share NaN:
    rank 1 by construction)."""
    e = error.double()
    if not bool(torch.isfinite(e).all()):  # a variant that produced NaN/Inf: no direction
        return (
            (None if e.dim() == 1 else torch.full_like(e[:, 0], math.nan)),
            (torch.full_like(e if e.dim() == 1 else e[0], math.nan)),
            math.nan,
        )
    if e.dim() == 1:
        norm = float(torch.linalg.vector_norm(e))
        return None, e / norm if norm > 0 else e, math.nan
    u, s, vh = torch.linalg.svd(e, full_matrices=False)
    energy = float((s**2).sum())
    return u[:, 0], vh[0], float(s[0] ** 2) / energy if energy > 0 else math.nan


def direction_similarity(
    directions: Sequence[tuple[torch.Tensor | None, torch.Tensor]],
) -> float:
    """Mean over consecutive steps of |u·u'|·|v·v'| (|v·v'| for vector errors); NaN below two."""
    sims = []
    for (u0, v0), (u1, v1) in itertools.pairwise(directions):
        sim = abs(float(v0 @ v1))
        if u0 is not None and u1 is not None:
            sim *= abs(float(u0 @ u1))
        sims.append(sim)
    return sum(sims) / len(sims) if sims else math.nan


def cumulative(values: Sequence[float]) -> list[float]:
    out, total = [], 0.0
    for value in values:
        total += value
        out.append(total)
    return out


def prefix_grid(length: int, min_n: int = 8) -> list[int]:
    """Prefix lengths min_n, 2·min_n, ... up to and including `length`."""
    grid, n = [], max(1, min_n)
    while n < length:
        grid.append(n)
        n *= 2
    return [*grid, length] if length >= 1 else []


def prefix_rms(row_errors: torch.Tensor, grid: Sequence[int]) -> list[float]:
    """RMS over paths (sequences, steps) of the error summed over each prefix of the rows.

    row_errors: [paths, T]. Causal attention makes a prefix's rows identical to the full run's
    first rows, so the prefix sums of the full run are the errors of the shorter sequences.
    """
    sums = row_errors.double().cumsum(dim=-1)
    return [float(sums[:, n - 1].pow(2).mean().sqrt()) for n in grid]


def growth_exponent(ns: Sequence[int], values: Sequence[float]) -> float:
    """Least-squares slope of log(value) against log(n); NaN with fewer than two usable points."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(ns, values, strict=True) if v > 0 and n > 0]
    if len(pts) < 2:
        return math.nan
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return math.nan
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


@dataclass
class ErrorSeries:
    """One quantity's error over steps, kept small: the running sum, the summed norms and each
    step's top singular pair (a GPT-2 dW error is 64 × 768 per head; steps × heads of them
    would not fit in memory)."""

    total: torch.Tensor | None = None
    norm_sum: float = 0.0
    directions: list[tuple[torch.Tensor | None, torch.Tensor]] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)

    def add(self, error: torch.Tensor) -> None:
        e = error.double()
        self.total = e.clone() if self.total is None else self.total + e
        self.norm_sum += float(torch.linalg.vector_norm(e.flatten()))
        u, v, share = top_direction(e)
        self.directions.append((u, v))
        self.shares.append(share)

    @property
    def steps(self) -> int:
        return len(self.directions)

    def coherence(self) -> float:
        """NaN below two steps (one step is trivially coherent)."""
        if self.total is None or self.norm_sum <= 0 or self.steps < 2:
            return math.nan
        return float(torch.linalg.vector_norm(self.total.flatten())) / self.norm_sum

    def direction_similarity(self) -> float:
        return direction_similarity(self.directions)

    def rank1_share(self) -> float:
        shares = [s for s in self.shares if s == s]
        return sum(shares) / len(shares) if shares else math.nan
