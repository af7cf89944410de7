"""The paper's central numerical claim, measured: rounding P̄V to bf16 is biased (§3.3.2).

Synthetic attention rows: `ties` scores equal the row max, every other score sits `gap` below
it (12-30 by default, so its P̄ only touches the low bits of the accumulator), and V is mostly
one-signed (N(v_mean, v_std), rounded to bf16). Each KernelSpec variant runs through the
reference emulator's online-softmax loop exactly as a kernel with that spec would; O is compared
with the fp64 softmax of the same scores times the same bf16 V.

The mechanism (paper, Su): two P̄ = 1 terms with same-sign, same-exponent V overflow the
significand, so the sum's last bit becomes the round bit; the tiny same-sign tail sets the sticky
bits, so a round bit of 1 always rounds away from zero. That needs the *sum itself* to be rounded
with the tail inside it: the paper's code rounds the unnormalised P̄V tile product to bf16
(preset paper-code). FA2 divides by ℓ in fp32 first; with two ties acc/ℓ sits on a bf16
midpoint and the tail moves it by Σp_j(v_j − Ō)/ℓ, whose sign follows the tail's V relative to
the tied tokens' V, not the sign of V (see `tail_v_mean`).

Layout: rows are grouped `ROWS_PER_BLOCK` to a batch entry sharing one V (as queries share
keys); rows of a group tie on disjoint keys, so each row's tied V values are its own, and each
row masks (score −inf) the keys the other rows of its group tie on, so its tail holds only
tail-distributed V: a row sees `keys − (group − 1)·ties` keys.

The pseudo-variant `exact` is the fp64 O rounded once to bf16: the best any kernel that stores O
in bf16 can do. Every variant's error is also reported against it (`excess`), which separates
what the kernel adds from what storing the true answer in bf16 costs anyway. The verdict is
read off the excess alone (`VERDICT_METHOD`): on one-signed V even ideal rounding errs one way
(on average toward zero on the default rows), and a kernel that rounds ideally must not be
called biased for it.

A second bias, in the normalisation: the backward recomputes P = exp(x − lse) from the kernel's
own scores x and the forward's lse = m + log ℓ, so ΣP − 1 = ℓ_exact/ℓ − 1 per row. A bf16
running ℓ is a sum of positive terms in which a tile's tail share below half an ulp of ℓ is
dropped, always the same way: on peaked rows ℓ comes out low and the recomputed softmax sums to
more than 1. The backward's score gradient then has a component along "raise every score of the
row" (Σ_j dS_ij = −(ΣP − 1)·δ_i), which the loss cannot see and which lands in Σ_j dK_j (the
key-shift leak). `rowsum_mean` / `rowsum_t` measure it per variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from flashprobe.numerics.bits import WorkedExample, worked_example
from flashprobe.probes.bias_config import BiasConfig, Variant, rows_per_block, validate
from flashprobe.probes.bias_notes import make_notes
from flashprobe.probes.bias_result import (
    SHRUNK_BELOW,
    T_METHOD,
    VERDICT_METHOD,
    VariantResult,
    verdict,
)
from flashprobe.probes.bias_rows import Rows, make_rows
from flashprobe.reference.emulator_backward import softmax_sum_error

#: A forward pass with the emulator's signature (injectable: tests, other backends).
ForwardFn = Callable[..., Any]


@dataclass(frozen=True)
class BiasReport:
    config: BiasConfig
    worked_example: WorkedExample
    variants: list[VariantResult]
    notes: list[str]
    environment: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "worked_example": self.worked_example.to_dict(),
            "variants": [v.to_dict() for v in self.variants],
            "notes": self.notes,
            "environment": self.environment,
            "t_stat_method": T_METHOD,
            "verdict_method": VERDICT_METHOD,
        }


def run_bias(config: BiasConfig, forward: ForwardFn | None = None) -> BiasReport:
    """Run every variant on its rows; `forward` defaults to the reference emulator."""
    variants = validate(config)
    if forward is None:
        from flashprobe.reference.emulator import online_softmax_forward as forward
    c = config
    per_row = rows_per_block(c, max(v.data.get("ties", c.ties) for v in variants))
    cache: dict[tuple[int, float, float], Rows] = {}
    results = []
    for var in variants:
        ties = int(var.data.get("ties", c.ties))
        v_mean = float(var.data.get("v_mean", c.v_mean))
        tail = var.data.get("tail_v_mean", c.tail_v_mean)
        tail_v_mean = v_mean if tail is None else float(tail)
        key = (ties, v_mean, tail_v_mean)
        if key not in cache:
            cache[key] = make_rows(c, ties, v_mean, tail_v_mean, per_row)
        data = cache[key]
        if var.spec is None:
            out = None
        else:
            out = forward(
                data.s, data.v, var.spec, scale=1.0, causal=False, low_dtype=torch.bfloat16
            )
        results.append(_measure(var, out, data, c.rows, ties, v_mean, tail_v_mean))
    from flashprobe.environment import environment

    return BiasReport(
        config=c,
        worked_example=worked_example(),
        variants=results,
        notes=make_notes(results, c),
        environment=environment(c.device),
    )


def _measure(
    var: Variant,
    out: Any,
    data: Rows,
    rows: int,
    ties: int,
    v_mean: float,
    tail_v_mean: float,
) -> VariantResult:
    d = data.o_ref.shape[-1]
    o = data.o_ref_bf16 if out is None else out.o.to(torch.float64)
    err = (o - data.o_ref).reshape(-1, d)[:rows].cpu()
    excess = (o - data.o_ref_bf16).reshape(-1, d)[:rows].cpu()
    mean, row_std, t = _t_stat(err)
    excess_mean, _, excess_t = _t_stat(excess)
    ideal = data.o_ref_bf16 - data.o_ref
    excess_share = _share(excess_mean, float(ideal.reshape(-1, d)[:rows].abs().mean()))
    ref_norm = data.o_ref.reshape(-1, d)[:rows].norm(dim=-1)
    shrunk = o.reshape(-1, d)[:rows].norm(dim=-1) < SHRUNK_BELOW * ref_norm
    sign = 0.0 if v_mean == 0 else math.copysign(1.0, v_mean)
    ones = events = rowsum_mean = rowsum_t = None
    if out is not None:
        ones = float(out.stats.p_bar_ones.reshape(-1)[:rows].to(torch.float64).mean())
        events = float(out.stats.tie_events.reshape(-1)[:rows].to(torch.float64).mean())
        # ΣP − 1 of the softmax the backward recomputes from this forward's lse, in fp64
        rowsum = softmax_sum_error(
            data.s.double(), out.lse.double(), var.spec, scale=1.0, causal=False,
            low_dtype=torch.bfloat16,
        )  # fmt: skip
        rowsum = rowsum.reshape(-1, 1)[:rows].cpu()
        rowsum_mean, _, rowsum_t = _t_stat(rowsum)
    return VariantResult(
        name=var.name,
        spec=var.spec,
        ties=ties,
        v_mean=v_mean,
        tail_v_mean=tail_v_mean,
        mean_error=mean,
        std_error=float(err.std()),
        row_mean_std=row_std,
        t_stat=t,
        frac_negative=float((err < 0).double().mean()),
        frac_zero=float((err == 0).double().mean()),
        frac_away=None if sign == 0 else float((err * sign > 0).double().mean()),
        away_from_zero=None if sign == 0 else mean * sign,
        mean_abs_error=float(err.abs().mean()),
        excess_mean=excess_mean,
        excess_t_stat=excess_t,
        excess_share=excess_share,
        p_bar_ones_per_row=ones,
        tie_events_per_row=events,
        verdict=verdict(excess_t, excess_mean, excess_share, sign, exact=out is None),
        rowsum_mean=rowsum_mean,
        rowsum_t=rowsum_t,
        shrunk_rows=float(shrunk.double().mean()),
    )


def _t_stat(err: torch.Tensor) -> tuple[float, float, float]:
    """(mean, std of the per-row means, t over per-row means) of a [rows, D] error."""
    per_row = err.mean(dim=-1)
    mean = float(err.mean())
    row_std = float(per_row.std())
    if row_std > 0:
        return mean, row_std, float(per_row.mean()) / (row_std / math.sqrt(per_row.numel()))
    return mean, row_std, 0.0 if mean == 0 else math.copysign(math.inf, mean)


def _share(mean: float, scale: float) -> float:
    """mean / scale, with 0/0 = 0 (exact rows: no excess and no rounding error)."""
    if mean == 0:
        return 0.0
    return mean / scale if scale > 0 else math.copysign(math.inf, mean)
