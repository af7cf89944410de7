"""The reference emulator's backward pass (FlashAttention-2 algebra, docs/semantics.md).

Tiling changes only the fp32 summation order of the backward, not where it rounds, so this works
on whole [B, H, M, N] matrices:

    P from lse ─► dP = dO·Vᵀ ─► δ ─► dS = P∘(dP − δ) ─► dQ = scale·dS·K, dK = scale·dSᵀ·Q
                             └──► dV = P̄ᵀ·dO
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flashprobe.errors import FlashprobeError
from flashprobe.numerics.rounding import apply_precision, low_dtype_for
from flashprobe.reference.emulator import (
    LOG2E,
    as_working,
    default_scale,
    fused_multiply_add,
    ieee_fp32_matmul,
    log2_scores,
    matmul,
    visible_keys,
    working_dtype,
)
from flashprobe.reference.heads import expand_kv, group_size, sum_groups
from flashprobe.spec import KernelSpec, resolve_spec

__all__ = ["BackwardResult", "emulate_backward"]


@dataclass(frozen=True)
class BackwardResult:
    """dq [B,H,M,D], dk and dv [B,H,N,D] in the input dtype; delta [B,H,M] fp32 as used."""

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    delta: torch.Tensor


def recompute_p(
    s_raw: torch.Tensor,
    lse: torch.Tensor,
    spec: KernelSpec,
    *,
    scale: float,
    causal: bool,
    low_dtype: torch.dtype,
) -> torch.Tensor:
    """Step 2: the normalised P = exp2(x − lse·LOG2E) from the forward's lse; 0 where masked.

    fused_scale fuses the scale into the subtraction here too, as the forward did.
    """
    work = s_raw.dtype
    keep = visible_keys(s_raw.shape[-2], s_raw.shape[-1], causal, s_raw.device)
    keep = keep & (s_raw != -math.inf)
    lse2 = lse.to(work) * as_working(LOG2E, work)
    lse2 = torch.where(torch.isfinite(lse2), lse2, torch.zeros_like(lse2))[..., None]
    if spec.softmax == "fused_scale":
        exponent = fused_multiply_add(s_raw, as_working(scale * LOG2E, work), -lse2)
    else:
        exponent = log2_scores(s_raw, spec, scale=scale, low_dtype=low_dtype) - lse2
    return torch.exp2(exponent.masked_fill(~keep, -math.inf))


def softmax_sum_error(
    s_raw: torch.Tensor,
    lse: torch.Tensor,
    spec: KernelSpec | str,
    *,
    scale: float,
    causal: bool,
    low_dtype: torch.dtype,
) -> torch.Tensor:
    """ΣP − 1 per row of the P the backward recomputes from the forward's lse (0 for an exact
    lse). A bf16 running ℓ makes it one-sided on rows whose max has P̄ = 1 (probes.bias);
    then the score gradient has a component Σ_j dS_ij = −(ΣP − 1)·δ_i that shifts the whole row.
    """
    p = recompute_p(s_raw, lse, resolve_spec(spec), scale=scale, causal=causal, low_dtype=low_dtype)
    return p.sum(dim=-1) - 1


def row_max_ties(
    s_raw: torch.Tensor, spec: KernelSpec | str, *, scale: float, low_dtype: torch.dtype
) -> torch.Tensor:
    """Per row, how many keys share its largest score as the spec rounds the scores (1: no tie;
    bf16 scores tie the maximum wholesale at large logits). Masked keys are −inf and never
    count; a fully masked row counts 0."""
    x = log2_scores(s_raw, resolve_spec(spec), scale=scale, low_dtype=low_dtype)
    top = x.amax(dim=-1, keepdim=True)
    return ((x == top) & torch.isfinite(top)).sum(dim=-1)


def scores_qk(
    q: torch.Tensor, k: torch.Tensor, *, causal: bool, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """q·kᵀ of the query rows `rows` (default: all) as a kernel computes it: IEEE fp32, autocast
    off, masked keys −inf (top-left causal)."""
    rows = torch.arange(q.shape[-2], device=q.device) if rows is None else rows
    k = expand_kv(k, group_size(q, k))
    with ieee_fp32_matmul(), torch.autocast(q.device.type, enabled=False):
        s = q[..., rows, :].float() @ k.float().transpose(-2, -1)
    if causal:  # top-left aligned: query i sees keys j <= i
        s = s.masked_fill(torch.arange(k.shape[-2], device=q.device) > rows[:, None], -math.inf)
    return s


@torch.no_grad()
def softmax_sum_error_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    lse: torch.Tensor,
    spec: KernelSpec | str,
    *,
    causal: bool,
    scale: float,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """`softmax_sum_error` from q [..., M, D], k [..., N, D] and the forward's lse [..., M], on
    the query rows `rows` (default: all): the scores again as a kernel computes them
    (`scores_qk`), then rounded as the spec rounds them."""
    rows = torch.arange(q.shape[-2], device=q.device) if rows is None else rows
    s = scores_qk(q, k, causal=causal, rows=rows)
    return softmax_sum_error(
        s, lse[..., rows].float(), spec, scale=scale, causal=False, low_dtype=low_dtype_for(q.dtype)
    )


def delta_rows(
    spec: KernelSpec,
    *,
    o: torch.Tensor,
    o_fp32: torch.Tensor | None,
    do: torch.Tensor,
    p: torch.Tensor,
    dp: torch.Tensor,
    v: torch.Tensor,
    low_dtype: torch.dtype,
) -> torch.Tensor:
    """Step 1: δ = rowsum(dO∘O), from the O that `delta_source` names, then maybe rounded."""
    work = do.dtype
    if spec.delta_source == "o_lowp":
        delta = (do * o.to(work)).sum(dim=-1)
    elif spec.delta_source == "o_fp32":
        if o_fp32 is None:
            raise FlashprobeError("delta_source 'o_fp32' needs the forward's o_fp32")
        delta = (do * o_fp32.to(work)).sum(dim=-1)
    elif spec.delta_source == "o_recompute":
        delta = (do * matmul(p, v)).sum(dim=-1)  # O' = PV from the unrounded P
    else:  # dp_p
        delta = (p * dp).sum(dim=-1)
    return apply_precision(delta, spec.delta_precision, low_dtype)


def emulate_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
    lse: torch.Tensor,
    spec: KernelSpec,
    *,
    causal: bool,
    scale: float | None = None,
    o_fp32: torch.Tensor | None = None,
) -> BackwardResult:
    """Gradients of the emulated attention w.r.t. q, k, v, given the forward's o and lse."""
    spec = resolve_spec(spec)
    scale = default_scale(q.shape[-1]) if scale is None else scale
    work, low = working_dtype(q.dtype), low_dtype_for(q.dtype)
    group = group_size(q, k)
    q_, k_, v_, do_ = (t.to(work) for t in (q, expand_kv(k, group), expand_kv(v, group), do))

    s_raw = matmul(q_, k_.transpose(-2, -1))
    p = recompute_p(s_raw, lse, spec, scale=scale, causal=causal, low_dtype=low)
    dp = matmul(do_, v_.transpose(-2, -1))  # step 3: low×low products, fp32 accumulation
    delta = delta_rows(spec, o=o, o_fp32=o_fp32, do=do_, p=p, dp=dp, v=v_, low_dtype=low)

    # Step 3: dV from P cast to the input dtype when P̄ is (FA2 casts P for this product).
    dv = matmul(apply_precision(p, spec.p_bar_precision, low).transpose(-2, -1), do_)
    # Step 4: dS from the unrounded P, then rounded for the two products when the spec says.
    ds = apply_precision(p * (dp - delta[..., None]), spec.ds_precision, low)
    # Step 5: back through S = scale·q·kᵀ; a bf16 score rounding passes straight through.
    scale_w = as_working(scale, work)
    dq = matmul(ds, k_) * scale_w
    dk = matmul(ds.transpose(-2, -1), q_) * scale_w
    # A shared key/value head: its query heads' gradients summed unrounded, then rounded once.
    dk, dv = sum_groups(dk, group), sum_groups(dv, group)
    return BackwardResult(dq=dq.to(q.dtype), dk=dk.to(q.dtype), dv=dv.to(q.dtype), delta=delta)
