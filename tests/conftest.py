"""Shared fixtures. The error gate itself lives in `flashprobe.numerics.gate` (importable from
any test directory, unlike a conftest module).

Without CUDA, the Triton kernels run in Triton's interpreter, which is chosen when Triton and
each kernel are first imported: so TRITON_INTERPRET is set here, before any test module
imports them (on a machine with CUDA it is left alone, and `pytest -m gpu` runs compiled).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def random_qkv(
    b: int,
    h: int,
    m: int,
    n: int,
    d: int,
    dtype: torch.dtype,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    kv_heads: int | None = None,
) -> QKV:
    """q [B,H,M,D], k and v [B,H_kv,N,D] (H_kv = kv_heads, default H) and dO [B,H,M,D]:
    standard normal, drawn in fp32 on the CPU (so every device sees the same numbers), then
    cast."""
    gen = torch.Generator().manual_seed(seed)
    hk = h if kv_heads is None else kv_heads
    shapes = [(b, h, m, d), (b, hk, n, d), (b, hk, n, d), (b, h, m, d)]
    tensors = [torch.randn(s, generator=gen).to(device=device, dtype=dtype) for s in shapes]
    return tensors[0], tensors[1], tensors[2], tensors[3]


@pytest.fixture
def make_qkv() -> Callable[..., QKV]:
    """`make_qkv(b, h, m, n, d, dtype, seed=0, device="cpu", kv_heads=None)` → (q, k, v, dO)."""
    return random_qkv


# -- the paper's released kernel, for fidelity tests ------------------------------------------
RELEASE_EPSILON = 1e-10  # attention.py: EPSILON, the clamp of each tile's row sum


def released_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    k_bucket_size: int,
    q_bucket_size: int | None = None,
    causal: bool = False,
    beta: float = 2.0,
    stable: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of the paper's released `FlashAttentionFunction.forward` (repository
    ucker/why-low-precision-training-fails, attention.py at 30ef021, lines 26-112), transcribed
    line by line without the padding mask (`mask=None`): every tensor in the input dtype (bf16
    einsums, exp, sums and running buffers; fp64 inputs give the fp64 golden of the same
    arithmetic), STABLE=1's tie shift (l.84-89, β hard-coded 2 there), each tile's row sum
    clamped at EPSILON before it enters the running sum (l.96), and causal attention as released
    (l.76-78): every key tile runs, with the entries above the diagonal filled with
    −finfo(dtype).max, so a tile wholly past a row is all fill, ties, and (STABLE) shifts the
    running max to max(m, 0) and adds the clamped 0 to ℓ. (With more keys than queries the
    release aligns the diagonal by `qk_len_diff`, kept here; flashprobe's tests use M = N.)
    lse = log ℓ + m is what the release's backward recomputes P from."""
    max_neg_value = -torch.finfo(q.dtype).max
    qk_len_diff = max(k.shape[-2] - q.shape[-2], 0)
    o = torch.zeros_like(q)
    all_row_sums = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype)
    all_row_maxes = torch.full((*q.shape[:-1], 1), max_neg_value, dtype=q.dtype)
    scale = q.shape[-1] ** -0.5
    q_bucket_size = q_bucket_size or q.shape[-2]
    row_splits = zip(
        q.split(q_bucket_size, dim=-2),
        o.split(q_bucket_size, dim=-2),
        all_row_sums.split(q_bucket_size, dim=-2),
        all_row_maxes.split(q_bucket_size, dim=-2),
        strict=True,
    )
    for ind, (qc, oc, row_sums, row_maxes) in enumerate(row_splits):
        q_start_index = ind * q_bucket_size - qk_len_diff
        col_splits = zip(
            k.split(k_bucket_size, dim=-2), v.split(k_bucket_size, dim=-2), strict=True
        )
        for k_ind, (kc, vc) in enumerate(col_splits):
            k_start_index = k_ind * k_bucket_size
            attn_weights = torch.einsum("... i d, ... j d -> ... i j", qc, kc) * scale
            if causal and q_start_index < (k_start_index + k_bucket_size - 1):
                causal_mask = torch.ones((qc.shape[-2], kc.shape[-2]), dtype=torch.bool).triu(
                    q_start_index - k_start_index + 1
                )
                attn_weights.masked_fill_(causal_mask, max_neg_value)
            block_row_maxes = attn_weights.amax(dim=-1, keepdim=True)
            if stable:
                close_to_max = attn_weights >= (block_row_maxes - 1e-3)
                tied = close_to_max.sum(dim=-1, keepdim=True) > 1
                block_row_maxes = torch.where(
                    tied & (block_row_maxes > 0), beta * block_row_maxes, block_row_maxes
                )
                block_row_maxes = torch.where(tied & (block_row_maxes < 0), 0, block_row_maxes)
            new_row_maxes = torch.maximum(block_row_maxes, row_maxes)
            exp_weights = torch.exp(attn_weights - new_row_maxes)
            block_row_sums = exp_weights.sum(dim=-1, keepdim=True).clamp(min=RELEASE_EPSILON)
            exp_values = torch.einsum("... i j, ... j d -> ... i d", exp_weights, vc)
            exp_row_max_diff = torch.exp(row_maxes - new_row_maxes)
            new_row_sums = exp_row_max_diff * row_sums + block_row_sums
            oc.mul_(exp_row_max_diff).add_(exp_values)
            row_maxes.copy_(new_row_maxes)
            row_sums.copy_(new_row_sums)
        oc.div_(row_sums)
    lse = all_row_sums.log() + all_row_maxes
    return o, lse[..., 0]


#: Keys of `tied_max_rows` that carry a row's tied maximum (inside one 32-key tile).
TIED_KEYS = (3, 17)


def tied_max_rows(
    maxes: list[float], *, n: int = 64, d: int = 16, seed: int = 0
) -> tuple[QKV, torch.Tensor]:
    """((q, k, v, dO) in bf16, exact O in fp64): row i's scores (scale 1/sqrt(d) = 1/4 at d 16)
    are exactly maxes[i] at keys TIED_KEYS (bf16 einsum and bf16 products alike: integers
    up to 256 in magnitude) and about ±1.5 elsewhere; V ~ N(−1, 1)."""
    gen = torch.Generator().manual_seed(seed)
    m = len(maxes)
    q = torch.zeros(1, 1, m, d)
    k = torch.zeros(1, 1, n, d)
    q[0, 0, :, 2:] = torch.randn(m, d - 2, generator=gen)
    k[0, 0, :, 2:] = 0.5 * torch.randn(n, d - 2, generator=gen)
    k[0, 0, TIED_KEYS, :] = 0.0
    k[0, 0, TIED_KEYS, 0] = 4.0  # q·k·scale = q[0]
    q[0, 0, :, 0] = torch.tensor(maxes)
    v = torch.randn(1, 1, n, d, generator=gen) - 1.0
    do = torch.randn(1, 1, m, d, generator=gen)
    q, k, v, do = (t.to(torch.bfloat16) for t in (q, k, v, do))
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(d)
    return (q, k, v, do), torch.softmax(s, dim=-1) @ v.double()


def negative_max_rows(max_logit: float, *, n: int, d: int = 16, seed: int = 0) -> QKV:
    """(q, k, v, dO) in bf16, n queries and n keys: every row's scores are exactly `max_logit`
    (< 0, an integer) at key 0, its maximum, and max_logit − 1 − j/2 at key j >= 1, so every key
    tile's max is one key (distinct in bf16 down to −128: n <= 200; past that only far below
    the row max), the stabilized tie rule never fires on the row's own scores, ℓ ≈ 1.9 and the
    running max stays at max_logit until a wholly masked tile's all-tied fill (masked_tiles =
    release) moves it to 0."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.zeros(1, 1, n, d)
    k = torch.zeros(1, 1, n, d)
    q[0, 0, :, 0] = max_logit
    q[0, 0, :, 1] = 1.0
    k[0, 0, :, 0] = 4.0  # scale 1/4 at d 16: q·k·scale = max_logit + k[1]/4
    k[0, 0, 1:, 1] = -4.0 - 2.0 * torch.arange(n - 1)  # even integers: exact in bf16
    v = torch.randn(1, 1, n, d, generator=gen) - 1.0
    do = torch.randn(1, 1, n, d, generator=gen)
    q, k, v, do = (t.to(torch.bfloat16) for t in (q, k, v, do))
    return q, k, v, do


def causal_exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Exact causal (top-left) attention in fp64."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    past = torch.ones(s.shape[-2:], dtype=torch.bool).triu(1)
    return torch.softmax(s.masked_fill(past, -math.inf), dim=-1) @ v.double()


def row_gate(x: torch.Tensor, reference: torch.Tensor, golden: torch.Tensor) -> torch.Tensor:
    """The error gate (`flashprobe.numerics.gate`) row by row: [rows] bool, True where a row's
    ||x − golden|| / ||golden|| is at most GATE_FACTOR × the reference's plus bf16's unit
    roundoff 2⁻⁸ (the absolute norm where the golden row is 0). NaN never passes. Rows are
    judged one by one because a shrunken row is orders of magnitude smaller than its
    neighbours and vanishes from the whole tensor's error; the floor is one rounding of a row
    (the whole-tensor gate's 2⁻¹⁰ assumes errors averaged over many rows), which a reference
    exact by luck on a 16-wide row (the release's bf16 α cancelling in O = α·acc / α·ℓ)
    would otherwise turn into a zero bound."""
    from flashprobe.numerics.gate import GATE_FACTOR

    def error(t: torch.Tensor) -> torch.Tensor:
        t64, g64 = t.double().flatten(0, -2), golden.double().flatten(0, -2)
        norm = g64.norm(dim=-1)
        return (t64 - g64).norm(dim=-1) / torch.where(norm > 0, norm, torch.ones_like(norm))

    bound = GATE_FACTOR * error(reference) + 2.0**-8
    return error(x) <= bound  # False for NaN


@pytest.fixture
def release() -> SimpleNamespace:
    """The released kernel's forward (`released_forward`) and the rows that probe its clamp
    (`tied_max_rows`, `TIED_KEYS`) and its wholly masked causal tiles (`negative_max_rows`,
    with `causal_exact`)."""
    return SimpleNamespace(
        forward=released_forward,
        rows=tied_max_rows,
        tied_keys=TIED_KEYS,
        negative_rows=negative_max_rows,
        causal_exact=causal_exact,
        row_gate=row_gate,
    )
