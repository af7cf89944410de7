"""The error gate that judges a low-precision attention variant against the fp64 golden.

A variant passes when

    rel_l2(variant) <= GATE_FACTOR * rel_l2(reference) + floor(dtype)

with rel_l2(x) = ||x − golden||₂ / ||golden||₂, and `reference` plain PyTorch attention computed
in the input dtype (matmul → softmax → matmul, each rounding to that dtype; gradients by autograd
through the same ops). So a kernel may be at most twice as inaccurate as the naive same-dtype
attention. NaN or inf anywhere never passes. The emulator tests and the kernel tests share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flashprobe.reference.heads import expand_kv, group_size

__all__ = [
    "GATE_FACTOR",
    "GATE_FLOORS",
    "GateResult",
    "assert_gate",
    "gate",
    "reference_attention",
    "reference_grads",
    "rel_l2",
]

GATE_FACTOR = 2.0
#: Absolute slack on the relative error, a quarter of the dtype's unit roundoff. It matters only
#: when the reference is nearly exact by luck (tiny or trivial shapes).
GATE_FLOORS: dict[torch.dtype, float] = {
    torch.bfloat16: 2.0**-10,
    torch.float16: 2.0**-13,
    torch.float32: 2.0**-26,
    torch.float64: 2.0**-55,
}


def rel_l2(x: torch.Tensor, golden: torch.Tensor) -> float:
    """||x − golden||₂ / ||golden||₂ computed in fp64; inf when x holds a NaN or inf.

    Where the golden is exactly zero (e.g. dq with a single visible key) there is no scale to be
    relative to, and this is the absolute norm ||x||₂.
    """
    x64, g64 = x.detach().to(torch.float64), golden.detach().to(torch.float64)
    if x64.shape != g64.shape:
        raise ValueError(f"shape {tuple(x64.shape)} does not match golden {tuple(g64.shape)}")
    if not bool(torch.isfinite(x64).all()):
        return math.inf
    norm = g64.norm().item()
    return (x64 - g64).norm().item() / (norm if norm > 0 else 1.0)


@dataclass(frozen=True)
class GateResult:
    error: float
    reference_error: float
    bound: float

    @property
    def passed(self) -> bool:
        return self.error <= self.bound  # False for NaN/inf errors

    def describe(self, name: str) -> str:
        verdict = "within" if self.passed else "exceeds"
        return (
            f"{name}: rel-L2 error {self.error:.3e} {verdict} the gate {self.bound:.3e} "
            f"(reference error {self.reference_error:.3e})"
        )


def gate(
    variant: torch.Tensor,
    reference: torch.Tensor,
    golden: torch.Tensor,
    *,
    dtype: torch.dtype,
    factor: float = GATE_FACTOR,
    floor: float | None = None,
) -> GateResult:
    """Judge `variant` against `golden`, with `reference` setting the allowed error."""
    ref_err = rel_l2(reference, golden)
    if not math.isfinite(ref_err):
        raise ValueError("the reference is not finite; the gate cannot judge against it")
    floor = GATE_FLOORS[dtype] if floor is None else floor
    return GateResult(rel_l2(variant, golden), ref_err, factor * ref_err + floor)


def assert_gate(
    name: str,
    variant: torch.Tensor,
    reference: torch.Tensor,
    golden: torch.Tensor,
    *,
    dtype: torch.dtype,
    factor: float = GATE_FACTOR,
    floor: float | None = None,
) -> None:
    """`gate`, raising AssertionError with the numbers when the variant fails."""
    result = gate(variant, reference, golden, dtype=dtype, factor=factor, floor=floor)
    if not result.passed:
        raise AssertionError(result.describe(name))


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain attention in the input dtype, differentiable: returns (o, lse).

    Causal masking is top-left aligned (query i sees keys j <= i), as everywhere in flashprobe.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = group_size(q, k)
    k, v = expand_kv(k, group), expand_kv(v, group)  # autograd sums a shared head's grads
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        m, n = s.shape[-2:]
        hidden = torch.ones(m, n, dtype=torch.bool, device=s.device).triu(diagonal=1)
        s = s.masked_fill(hidden, -math.inf)
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


def reference_grads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of `reference_attention` for the upstream gradient `do`, in the input dtype."""
    with torch.enable_grad():
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        o, _ = reference_attention(*leaves, causal=causal, scale=scale)
        dq, dk, dv = torch.autograd.grad(o, leaves, do)
    return dq, dk, dv
