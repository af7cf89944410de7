"""What the replay measures of one variant against the fp64 golden. Per variant,
step, layer and head (error = variant − fp64 golden):

    o_mean, o_t          signed error of O (t over per-row means, attribution.mechanism)
    delta_mean, delta_t  signed error of δ = rowsum(dO∘O) as the variant's backward uses it
    delta_sum            Σ over the captured tokens of the δ error (its running sum over steps
                         is the paper's Fig. 5a)
    dq/dk/dv_rel         relative errors of the attention gradients (grouped-query captures:
                         each query head runs on its own copy of its key/value head, so dK and
                         dV are that head's share of the shared head's gradient)
    wq_rel, wk_rel       relative error of the weight-gradient contribution dW = dQᵀX (dKᵀX)
                         when the capture holds the layer input X (key layer{i}.x, B × T × C);
                         without X, the token-summed dQ (dK) error (what dQᵀX is if every row
                         of X is the same x̄, the paper's similarity claim, up to the x̄ factor)
                         over the summed row norms of the golden dQ (dK) (Σ_T dK is exactly 0)
    tie_events, p_bar_ones   the variant's tied-maximum tiles and P̄ = 1 entries
    key_shift_leak/drift ‖Σ_j dK_j‖ / ‖dK‖ (exactly 0 for exact gradients: softmax ignores a
                         common shift of a row's scores) and whether that leak pushes the scores
                         up (> 0) or down (attribution.mechanism.key_shift_leak)
    softmax_sum_bias/_t  mean (and t over rows) of ΣP − 1 for the softmax the variant's backward
                         recomputes from its forward's lse (> 0: a bf16 running ℓ drops tails)
    tied_rows, softmax_sum_bias_tied/_untied, softmax_sum_tied_share
                         where that bias sits: rows whose largest (rounded) score two or more
                         keys share, against the others (mechanism.softmax_sum_record)

and across steps per variant, layer and head: the δ error's running sum and coherence
|Σ_t s_t| / Σ_t |s_t|, the weight-gradient error's coherence ‖Σ_t E_t‖ / Σ_t ‖E_t‖, its top
singular directions' step-to-step similarity and rank-1 energy share, and the growth exponent of
the summed δ error over prefixes of the sequence (≈ 1 bias, ≈ 0.5 noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from flashprobe.attribution import mechanism as mech
from flashprobe.attribution.replay_kernel import KernelRun

MIN_PREFIX = 8  # shortest prefix of the growth fit


@dataclass
class HeadSeries:
    """One variant's head across the replayed steps."""

    steps: list[int] = field(default_factory=list)
    delta_sums: list[float] = field(default_factory=list)
    delta_rows: list[torch.Tensor] = field(default_factory=list)  # [B, T] per step
    wq: mech.ErrorSeries = field(default_factory=mech.ErrorSeries)
    wk: mech.ErrorSeries = field(default_factory=mech.ErrorSeries)

    def to_dict(self, variant: str, layer: int, head: int) -> dict[str, Any]:
        abs_sum = sum(abs(s) for s in self.delta_sums)
        rows = torch.cat(self.delta_rows) if self.delta_rows else torch.zeros(0, 0)
        grid = mech.prefix_grid(rows.shape[-1], MIN_PREFIX) if rows.numel() else []
        rms = mech.prefix_rms(rows, grid) if grid else []
        return {
            "variant": variant,
            "layer": layer,
            "head": head,
            "steps": self.steps,
            "delta_cumsum": mech.cumulative(self.delta_sums),
            "delta_coherence": abs(sum(self.delta_sums)) / abs_sum
            if abs_sum > 0 and len(self.steps) > 1
            else None,
            "wq_coherence": self.wq.coherence(),
            "wk_coherence": self.wk.coherence(),
            "wq_direction_similarity": self.wq.direction_similarity(),
            "wk_direction_similarity": self.wk.direction_similarity(),
            "wq_rank1_share": self.wq.rank1_share(),
            "wk_rank1_share": self.wk.rank1_share(),
            "growth_n": grid,
            "growth_rms": rms,
            "growth_exponent": mech.growth_exponent(grid, rms) if grid else None,
        }


def head_metrics(
    run: KernelRun,
    j: int,
    head: int,
    gold_f: Any,
    gold_b: Any,
    x64: torch.Tensor | None,
) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor, torch.Tensor]:
    eo = run.o[:, j].double() - gold_f.o[:, head]
    ed = run.delta[:, j].double() - gold_b.delta[:, head]
    o_mean, o_t = mech.signed_error(eo)
    d_mean, d_t = mech.signed_error(ed.unsqueeze(-1))
    dq_err = run.dq[:, j].double() - gold_b.dq[:, head]
    dk_err = run.dk[:, j].double() - gold_b.dk[:, head]
    if x64 is not None:  # dW_Q[h] = Σ_{b,t} dq[b,t]ᵀ x[b,t] (head_dim × n_embd)
        wq_err = torch.einsum("btd,btc->dc", dq_err, x64)
        wk_err = torch.einsum("btd,btc->dc", dk_err, x64)
        wq_ref = torch.einsum("btd,btc->dc", gold_b.dq[:, head], x64)
        wk_ref = torch.einsum("btd,btc->dc", gold_b.dk[:, head], x64)
    else:
        # Σ_T dK is exactly 0 (each row of dS sums to 0), so the proxies are measured against
        # the summed row norms instead of the norm of the sum.
        wq_err, wk_err = dq_err.sum(dim=(0, 1)), dk_err.sum(dim=(0, 1))
        wq_ref, wk_ref = _row_norm_sum(gold_b.dq[:, head]), _row_norm_sum(gold_b.dk[:, head])
    rows = int(ed.numel())
    rec: dict[str, Any] = {
        "rows": rows,
        "o_mean": o_mean,
        "o_t": o_t,
        "o_abs": float(eo.abs().mean()),
        "delta_mean": d_mean,
        "delta_t": d_t,
        "delta_sum": float(ed.sum()),
        "dq_rel": mech.relative_error(run.dq[:, j], gold_b.dq[:, head]),
        "dk_rel": mech.relative_error(run.dk[:, j], gold_b.dk[:, head]),
        "dv_rel": mech.relative_error(run.dv[:, j], gold_b.dv[:, head]),
        # the exact gradients' sizes, so that errors can be pooled over heads by size
        "dq_ref_norm": float(torch.linalg.vector_norm(gold_b.dq[:, head].double().flatten())),
        "dk_ref_norm": float(torch.linalg.vector_norm(gold_b.dk[:, head].double().flatten())),
        "wq_rel": _ratio(wq_err, wq_ref),
        "wk_rel": _ratio(wk_err, wk_ref),
        "tie_events": _total(run.tie_events, j),
        "p_bar_ones": _total(run.p_bar_ones, j),
    }
    return rec, ed.reshape(-1, ed.shape[-1]).cpu(), wq_err.cpu(), wk_err.cpu()


def _ratio(err: torch.Tensor, ref: torch.Tensor) -> float:
    num = float(torch.linalg.vector_norm(err.flatten()))
    den = float(torch.linalg.vector_norm(ref.double().flatten()))
    return num / den if den > 0 else (0.0 if num == 0 else math.nan)


def _row_norm_sum(t: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(t.double(), dim=-1).sum().reshape(1)


def _total(t: torch.Tensor | None, j: int) -> float | None:
    return None if t is None else float(t[:, j].double().sum())
