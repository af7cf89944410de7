"""Muon (momentum + Newton–Schulz orthogonalisation) for 2-D hidden weights, AdamW for the rest.

As in the paper's Muon runs (and Moonlight, arXiv:2502.16982): the orthogonalised update is
RMS-matched to AdamW by the factor 0.2·sqrt(max(rows, cols)), so one lr and one decoupled weight
decay serve both parts. One optimizer object holds both kinds of parameter group (`use_muon`),
so checkpoints and the lr schedule treat it like AdamW. The fused QKV matrix is orthogonalised
as one matrix. Newton–Schulz runs in fp32 for reproducibility, batched over the matrices of one
shape (fewer, larger matmuls than one per matrix: a small model's step is launch-bound).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Keller Jordan's quintic iteration
RMS_MATCH = 0.2


def newton_schulz(grad: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Approximately U·Vᵀ of grad = U·S·Vᵀ (singular values pushed to about 0.7-1.2).

    grad is one matrix or a stack of them (leading batch dimensions), each orthogonalised alone.
    """
    a, b, c = NS_COEFFICIENTS
    x = grad.float()
    transposed = x.shape[-2] > x.shape[-1]
    if transposed:  # iterate on the wide orientation: smaller Gram matrix
        x = x.mT
    x = x / (torch.linalg.matrix_norm(x, keepdim=True) + eps)
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.mT if transposed else x


class MuonWithAdamW(torch.optim.Optimizer):
    """Parameter groups with `use_muon=True` get Muon; the others AdamW."""

    def __init__(
        self,
        param_groups: Iterable[dict[str, Any]],
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        momentum: float,
        nesterov: bool,
        ns_steps: int,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            use_muon=False,
        )
        super().__init__(param_groups, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if group["use_muon"]:
                self._muon_update(params, group)
            else:
                self._adamw_update(params, group)

    # Both updates use multi-tensor (`torch._foreach_*`) ops: the same arithmetic per element as
    # one op per parameter, in a few kernel launches instead of hundreds per step.

    def _muon_update(self, params: list[torch.Tensor], group: dict[str, Any]) -> None:
        grads = [p.grad for p in params]
        bufs = [self._state(p, "momentum_buffer") for p in params]
        torch._foreach_mul_(bufs, group["momentum"])
        torch._foreach_add_(bufs, grads)
        directions = (
            torch._foreach_add(grads, bufs, alpha=group["momentum"]) if group["nesterov"] else bufs
        )
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(params):
            by_shape.setdefault(tuple(p.shape), []).append(i)
        for shape, index in by_shape.items():
            same_shape = [params[i] for i in index]
            updates = newton_schulz(torch.stack([directions[i] for i in index]), group["ns_steps"])
            scale = RMS_MATCH * math.sqrt(max(shape))
            torch._foreach_mul_(same_shape, 1.0 - group["lr"] * group["weight_decay"])
            torch._foreach_add_(
                same_shape, [u.to(p.dtype) for u, p in zip(updates, same_shape, strict=True)],
                alpha=-group["lr"] * scale,
            )  # fmt: skip

    def _adamw_update(self, params: list[torch.Tensor], group: dict[str, Any]) -> None:
        beta1, beta2 = group["betas"]
        by_step: dict[float, list[torch.Tensor]] = {}  # one bias correction per step count
        for p in params:
            state = self.state[p]
            if "step" not in state:
                state["step"] = torch.zeros((), dtype=torch.float32)
            state["step"] += 1
            by_step.setdefault(float(state["step"]), []).append(p)
        for step, ps in by_step.items():
            grads = [p.grad for p in ps]
            exp_avg = [self._state(p, "exp_avg") for p in ps]
            exp_avg_sq = [self._state(p, "exp_avg_sq") for p in ps]
            torch._foreach_lerp_(exp_avg, grads, 1.0 - beta1)
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1.0 - beta2)
            bias1 = 1.0 - beta1**step
            bias2 = 1.0 - beta2**step
            denom = torch._foreach_div(exp_avg_sq, bias2)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, group["eps"])
            torch._foreach_mul_(ps, 1.0 - group["lr"] * group["weight_decay"])
            torch._foreach_addcdiv_(ps, exp_avg, denom, value=-group["lr"] / bias1)

    def _state(self, p: torch.Tensor, name: str) -> torch.Tensor:
        """A zero-initialised per-parameter buffer."""
        state = self.state[p]
        if name not in state:
            state[name] = torch.zeros_like(p)
        return state[name]
