"""The reference emulator: a flash-attention forward pass in PyTorch, rounding where the spec says.

This is the ground truth the Triton kernels must match. It follows docs/semantics.md step by
step; each step is one function below, named after the paper's symbols:

    S ─► x (log2 units) ─► tile max r, ties ─► running max m ─► P̄ ─► ℓ ─► P̄V ─► update ─► epilogue

The loop runs over key tiles of `spec.block_n` columns, vectorised over every query row at once
(`block_m` cannot change the forward: rows are independent). Everything not explicitly rounded
by `rnd` (`apply_precision`) stays in the working dtype: fp32, or fp64 for fp64 inputs so that
`torch.autograd.gradcheck` can check the backward's algebra.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from flashprobe.numerics.rounding import apply_precision, low_dtype_for
from flashprobe.reference.heads import expand_kv, group_size
from flashprobe.spec import KernelSpec, resolve_spec
from flashprobe.stats import AttentionStats

LOG2E = 1.4426950408889634  # the kernels work in base 2: exp(s) = exp2(s * LOG2E)

__all__ = [
    "LOG2E",
    "ForwardResult",
    "emulate_forward",
    "online_softmax_forward",
    "rounded_row_sum_floor",
]


@dataclass(frozen=True)
class ForwardResult:
    """What the forward pass returns, and what the backward and the instruments need.

    o: [B, H, M, D] in the output dtype (the input dtype for `emulate_forward`).
    o_fp32: [B, H, M, D] fp32 O before its final rounding (kept for delta_source = o_fp32).
    lse: [B, H, M] fp32 natural-log log-sum-exp, as the backward recomputes P from it.
    stats: per-row instrumentation (see `flashprobe.stats.AttentionStats`).
    """

    o: torch.Tensor
    o_fp32: torch.Tensor
    lse: torch.Tensor
    stats: AttentionStats


# -- helpers shared with the backward -------------------------------------------------------
def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of every unrounded intermediate: fp32, or fp64 for fp64 inputs (gradcheck)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


@functools.lru_cache(maxsize=1024)  # a handful of constants, rounded on every emulator call
def as_working(value: float, dtype: torch.dtype) -> float:
    """A Python constant rounded to the working dtype, as a kernel receives it (fp32 scalar)."""
    return torch.tensor(value, dtype=torch.float64).to(dtype).item()


@contextlib.contextmanager
def ieee_fp32_matmul() -> Iterator[None]:
    """fp32 matmuls in true IEEE fp32: TF32 would round the inputs to 10 mantissa bits."""
    cuda_matmul = torch.backends.cuda.matmul
    # torch >= 2.9 spells the switch fp32_precision; older releases only have allow_tf32.
    name, ieee = ("fp32_precision", "ieee")
    if not hasattr(cuda_matmul, name):
        name, ieee = ("allow_tf32", False)
    saved = getattr(cuda_matmul, name)
    setattr(cuda_matmul, name, ieee)
    try:
        yield
    finally:
        setattr(cuda_matmul, name, saved)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in the working dtype. With 16-bit-representable inputs the fp32 products are exact,
    so this is the kernels' `tl.dot` of two low tiles with fp32 accumulation."""
    with ieee_fp32_matmul():
        return a @ b


def fused_multiply_add(a: torch.Tensor, b: float, c: torch.Tensor) -> torch.Tensor:
    """a*b + c rounded once to a's dtype, as a hardware FMA does.

    In fp64 the product of two fp32 values is exact; the fp64 addition and the cast back to fp32
    then round twice, which differs from a true single rounding only in rare halfway cases.
    (For fp64 working precision there is nothing finer to emulate with: it is plain a*b + c.)
    """
    if a.dtype == torch.float64:
        return a * b + c
    return (a.double() * b + c.double()).to(a.dtype)


def visible_keys(m: int, n: int, causal: bool, device: torch.device) -> torch.Tensor:
    """[M, N] bool, True where query i may attend to key j (causal: top-left aligned, j <= i)."""
    if not causal:
        return torch.ones(m, n, dtype=torch.bool, device=device)
    rows = torch.arange(m, device=device)[:, None]
    cols = torch.arange(n, device=device)[None, :]
    return cols <= rows


def log2_scores(
    s_raw: torch.Tensor, spec: KernelSpec, *, scale: float, low_dtype: torch.dtype
) -> torch.Tensor:
    """Step 1: the scaled score x = S·LOG2E in log2 units (forward and backward alike).

    fp32 scores: one multiply by the constant scale·LOG2E. bf16 scores: S = rnd(s_raw·scale) in
    natural units, as the paper's bf16 einsum produces it, then x = S·LOG2E.
    """
    work = s_raw.dtype
    if spec.score_precision == "fp32":
        return s_raw * as_working(scale * LOG2E, work)
    s = apply_precision(s_raw * as_working(scale, work), "bf16", low_dtype)
    return s * as_working(LOG2E, work)


# -- forward steps ---------------------------------------------------------------------------
def tile_max_and_ties(
    x: torch.Tensor, keep: torch.Tensor, spec: KernelSpec
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 2: the tile row max r and the number of scores within tie_tolerance of it.

    x is −inf where masked, so r = −inf marks a row with no visible key in this tile; masked
    entries never count as ties.
    """
    r = x.amax(dim=-1)
    tolerance = as_working(spec.tie_tolerance * LOG2E, x.dtype)  # given in natural units
    ties = ((x >= (r - tolerance)[..., None]) & keep).sum(dim=-1, dtype=torch.int32)
    return r, ties


def running_max(
    m_old: torch.Tensor, r: torch.Tensor, ties: torch.Tensor, spec: KernelSpec
) -> torch.Tensor:
    """Step 3: the new running max m. Stabilized (paper Alg. 3): a tied tile max r moves to β·r
    (r > 0) or 0 (r <= 0), so that no P̄ of the tile is exactly 1."""
    m_tile = r
    if spec.softmax == "stabilized":
        shifted = torch.where(r > 0, r * spec.beta, torch.zeros_like(r))
        m_tile = torch.where(ties > 1, shifted, r)
    return torch.maximum(m_old, m_tile)


def p_bar(
    x: torch.Tensor,
    s_raw: torch.Tensor,
    keep: torch.Tensor,
    m: torch.Tensor,
    spec: KernelSpec,
    *,
    scale: float,
) -> torch.Tensor:
    """Step 4: the unnormalised probabilities P̄ = exp2(x − m), 0 where masked.

    fused_scale subtracts m inside one FMA on the raw score, so the max entry gives the
    rounding residual of s_raw·(scale·LOG2E) instead of exactly 0.
    """
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))[..., None]  # no key seen yet
    if spec.softmax == "fused_scale":
        exponent = fused_multiply_add(s_raw, as_working(scale * LOG2E, s_raw.dtype), -m)
        exponent = exponent.masked_fill(~keep, -math.inf)
    else:
        exponent = x - m
    return torch.exp2(exponent)


def rounded_row_sum_floor(spec: KernelSpec, low_dtype: torch.dtype) -> float | None:
    """spec.row_sum_floor rounded to the 16-bit dtype, as the paper's `.clamp(min=1e-10)` on a
    bf16 tensor applies it (bf16: 1.00044e-10; fp16: 0, a clamp that does nothing)."""
    if spec.row_sum_floor is None:
        return None
    floor = torch.tensor(spec.row_sum_floor, dtype=torch.float64).to(low_dtype).item()
    return floor or None


def released_masked_rows(
    rows: torch.Tensor, start: int, causal: bool, spec: KernelSpec
) -> torch.Tensor:
    """[M] bool: rows that the causal key tile starting at `start` lies wholly past (all its
    keys after the row) and that still run it, as the paper's released kernel does
    (masked_tiles = release). Its scores are the fill −max, all masked here (x = −inf, so P̄ = 0),
    but each one ties with the tile max: stabilized softmax shifts the tile max to 0 (if the
    tile has more than one key), and its row sum 0 is clamped to the floor."""
    return rows < start if causal and spec.masked_tiles == "release" else rows < 0


def tile_row_sum(
    p: torch.Tensor, p_used: torch.Tensor, spec: KernelSpec, floor: float | None = None
) -> torch.Tensor:
    """Step 5: this tile's share of ℓ, from the rounded P̄ or from the unrounded one, clamped
    from below at `floor` (`row_sum_floor`) when the spec has one.

    The clamp is why the released stabilized kernel shrinks O instead of failing: where β·r
    pushes every P̄ of a tile to ~e^(−(β−1)r), its sum is replaced by the floor, so
    O = P̄V/ℓ comes out smaller than the true O (and exactly 0 once P̄ underflows) where
    ℓ = 0 would give 0/0.
    """
    l_tile = (p_used if spec.l_from_rounded_p else p).sum(dim=-1)
    return l_tile if floor is None else torch.clamp(l_tile, min=floor)


def update(
    acc: torch.Tensor,
    l: torch.Tensor,  # noqa: E741 - the paper's ℓ
    alpha: torch.Tensor,
    pv: torch.Tensor,
    l_tile: torch.Tensor,
    spec: KernelSpec,
    low_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 7: rescale the running O and ℓ by α = exp2(m_old − m_new) and add this tile.

    bf16 accumulator (the paper's code: `oc.mul_(α).add_(P̄V)` on bf16 buffers): the product,
    the P̄V einsum output and the sum are each rounded.
    """

    def rnd(t: torch.Tensor) -> torch.Tensor:
        return apply_precision(t, "bf16", low_dtype)

    if spec.accumulator == "fp32":
        acc = acc * alpha[..., None] + pv
    else:
        acc = rnd(rnd(acc * alpha[..., None]) + rnd(pv))
    l = l * alpha + l_tile  # noqa: E741
    return acc, (l if spec.l_precision == "fp32" else rnd(l))


def epilogue(
    acc: torch.Tensor,
    l: torch.Tensor,  # noqa: E741 - the paper's ℓ
    m: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 8: O = acc / ℓ (before its rounding) and lse = (m + log2 ℓ) / LOG2E, natural log.

    A row that saw no key at all (m = −inf, only possible with −inf input scores) gets O = 0 and
    lse = −inf. A row that saw keys but whose every P̄ underflowed (ℓ = 0: the stabilized max
    β·r with a large tied logit r, paper §4's "too large β") gets O = 0/0 = NaN, as a kernel
    does: the failure must show, not read as a zero output. With a `row_sum_floor` (the
    paper's release) ℓ never drops below the floor, so such a row gets O = 0 (finite) instead.
    """
    seen = torch.isfinite(m)[..., None]
    o = torch.where(seen, acc / torch.where(seen, l[..., None], torch.ones_like(acc)), 0.0)
    lse = (m + torch.log2(l)) / as_working(LOG2E, m.dtype)
    return o, lse


def online_softmax_forward(
    s_raw: torch.Tensor,
    v: torch.Tensor,
    spec: KernelSpec,
    *,
    scale: float,
    causal: bool,
    low_dtype: torch.dtype,
    out_dtype: torch.dtype | None = None,
) -> ForwardResult:
    """The tiled online softmax and P̄V on precomputed, UNSCALED scores.

    s_raw: [B, H, M, N] fp32 (or fp64) q·kᵀ; −inf entries count as masked, like the causal mask.
    v: [B, H, N, D] in s_raw's dtype, holding `low_dtype`-representable values.
    low_dtype: what `rnd` rounds to (the "bf16" of the spec fields).
    out_dtype: dtype of the stored O; defaults to `low_dtype`.
    """
    spec = resolve_spec(spec)
    work = s_raw.dtype
    *batch, n_q, n_k = s_raw.shape
    v = v.to(work)
    keep_all = visible_keys(n_q, n_k, causal, s_raw.device) & (s_raw != -math.inf)

    x_all = log2_scores(s_raw, spec, scale=scale, low_dtype=low_dtype)
    x_all = x_all.masked_fill(~keep_all, -math.inf)

    m = torch.full([*batch, n_q], -math.inf, dtype=work, device=s_raw.device)
    l = torch.zeros_like(m)  # noqa: E741 - the paper's ℓ
    acc = torch.zeros([*batch, n_q, v.shape[-1]], dtype=work, device=s_raw.device)
    tie_events = torch.zeros(m.shape, dtype=torch.int32, device=s_raw.device)
    p_bar_ones = torch.zeros_like(tie_events)

    floor = rounded_row_sum_floor(spec, low_dtype)
    block_n = spec.block_n or n_k
    rows = torch.arange(n_q, device=s_raw.device)
    for start in range(0, n_k, block_n):
        cols = slice(start, start + block_n)  # the last tile may be partial
        x, keep = x_all[..., cols], keep_all[..., cols]

        r, ties = tile_max_and_ties(x, keep, spec)
        past = released_masked_rows(rows, start, causal, spec)  # rows this tile lies past
        ties = torch.where(past, min(block_n, n_k - start), ties)  # every fill score ties
        active = (r > -math.inf) | past  # rows that see a key here; the others skip the tile
        m_new = torch.where(active, running_max(m, r, ties, spec), m)

        p = p_bar(x, s_raw[..., cols], keep, m_new, spec, scale=scale)
        p_used = apply_precision(p, spec.p_bar_precision, low_dtype)
        l_tile = tile_row_sum(p, p_used, spec, floor)  # rows without a key here skip it
        pv = matmul(p_used, v[..., cols, :])  # step 6

        first = m == -math.inf  # α = 1 on a row's first tile (and avoids −inf − (−inf))
        alpha = torch.where(first, torch.ones_like(m), torch.exp2(m - m_new))
        acc_new, l_new = update(acc, l, alpha, pv, l_tile, spec, low_dtype)
        acc = torch.where(active[..., None], acc_new, acc)
        l = torch.where(active, l_new, l)  # noqa: E741
        m = m_new

        tie_events += (active & ~past & (ties > 1)).to(torch.int32)  # real scores only
        p_bar_ones += (p_used == 1.0).sum(dim=-1, dtype=torch.int32)

    if spec.row_sum_bias:  # an injected softmax-sum bias (a probe): ΣP − 1 = row_sum_bias
        l = l / as_working(1.0 + spec.row_sum_bias, work)  # noqa: E741
    o_fp32, lse = epilogue(acc, l, m)
    row_max = x_all.amax(dim=-1) / as_working(LOG2E, work)
    stats = AttentionStats(lse=lse, row_max=row_max, tie_events=tie_events, p_bar_ones=p_bar_ones)
    return ForwardResult(o=o_fp32.to(out_dtype or low_dtype), o_fp32=o_fp32, lse=lse, stats=stats)


def emulate_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spec: KernelSpec,
    *,
    causal: bool,
    scale: float | None = None,
) -> ForwardResult:
    """Flash-attention forward of q [B,H,M,D], k and v [B,H_kv,N,D] as `spec` rounds it
    (H_kv dividing H: grouped-query attention, `flashprobe.reference.heads`).

    O comes back in the input dtype; "bf16" spec fields round to fp16 for fp16 inputs.
    """
    scale = default_scale(q.shape[-1]) if scale is None else scale
    work = working_dtype(q.dtype)
    group = group_size(q, k)
    k, v = expand_kv(k, group), expand_kv(v, group)
    s_raw = matmul(q.to(work), k.to(work).transpose(-2, -1))  # step 1: exact low×low products
    return online_softmax_forward(
        s_raw,
        v.to(work),
        spec,
        scale=scale,
        causal=causal,
        low_dtype=low_dtype_for(q.dtype),
        out_dtype=q.dtype,
    )
