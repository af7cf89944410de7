"""What the `row_sum_bias` probe does to the gradients, exactly (docs/semantics.md, step 8).

With ℓ divided by c = 1 + ε, the forward is O = c·softmax(S)·V and the backward's recomputed P
sums to c; FlashAttention-2's dS = P∘(dP − δ) assumes it sums to 1. The result is the true
gradient of O = c·softmax(S)·V plus the gradient of −ε·δ·lse with δ held fixed: a push on each
row's log-sum-exp, weighted by its δ. It does not depend on where δ comes from, since every δ
source computes the same rowsum(dO∘O) = rowsum(dP∘P) here: a δ fix cannot remove it.
"""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.reference.emulator import emulate_forward
from flashprobe.reference.emulator_backward import emulate_backward
from flashprobe.reference.golden import golden_backward, golden_forward
from flashprobe.spec import make_spec

EPS = 0.05


def exact_gradients(q, k, v, do, eps: float, causal: bool):
    """The fp64 golden's gradients of O = (1 + eps)·softmax(S)·V (the golden's with dO scaled by
    1 + eps: O is linear in that factor), and the probe's predicted dQ, dK."""
    scale = 1 / math.sqrt(q.shape[-1])
    true = golden_backward(q, k, v, (1 + eps) * do, causal=causal, scale=scale)
    p = golden_forward(q, k, v, causal=causal, scale=scale).p
    # true.delta = rowsum(dO∘O) of the biased forward; ∂(−eps·δ·lse)/∂S = −eps·δ·P, δ fixed
    error_ds = -eps * true.delta[..., None] * p
    predicted_dq = true.dq + error_ds @ k.double() * scale
    predicted_dk = true.dk + error_ds.transpose(-2, -1) @ q.double() * scale
    return (true.dq, true.dk, true.dv), (predicted_dq, predicted_dk)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b).norm() / b.norm()).item()


@pytest.mark.parametrize("delta_source", ["o_fp32", "o_recompute", "dp_p"])
@pytest.mark.parametrize("causal", [True, False])
def test_the_probe_adds_the_gradient_of_minus_eps_delta_lse(delta_source: str, causal: bool):
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(1, 2, 37, 16) for _ in range(4))
    spec = make_spec("fp32", {"row_sum_bias": EPS, "delta_source": delta_source})
    fwd = emulate_forward(q, k, v, spec, causal=causal)
    grads = emulate_backward(q, k, v, fwd.o, do, fwd.lse, spec, causal=causal, o_fp32=fwd.o_fp32)
    (true_dq, true_dk, true_dv), (predicted_dq, predicted_dk) = exact_gradients(
        q, k, v, do, EPS, causal
    )
    # fp32 rounding away from the prediction, several percent away from the true gradient
    assert rel(grads.dq, predicted_dq) < 1e-5 and rel(grads.dk, predicted_dk) < 1e-5
    assert rel(grads.dq, true_dq) > 0.01 and rel(grads.dk, true_dk) > 0.01
    assert rel(grads.dv, true_dv) < 1e-5  # dV = Pᵀ·dO is exact for the biased forward


def test_without_the_bias_the_gradient_is_the_true_one() -> None:
    torch.manual_seed(1)
    q, k, v, do = (torch.randn(1, 2, 37, 16) for _ in range(4))
    spec = make_spec("fp32", {})
    fwd = emulate_forward(q, k, v, spec, causal=True)
    grads = emulate_backward(q, k, v, fwd.o, do, fwd.lse, spec, causal=True, o_fp32=fwd.o_fp32)
    (true_dq, true_dk, _), _ = exact_gradients(q, k, v, do, 0.0, True)
    assert rel(grads.dq, true_dq) < 1e-5 and rel(grads.dk, true_dk) < 1e-5
