"""Muon (momentum + Newton–Schulz orthogonalisation) for 2-D hidden weights, AdamW for the rest.

As in the paper's Muon runs (and Moonlight, arXiv:2502.16982): the orthogonalised update is
RMS-matched to AdamW by the factor 0.2·sqrt(max(rows, cols)), so one lr and one decoupled weight
decay serve both parts. One optimizer object holds both kinds of parameter group (`use_muon`),
so checkpoints and the lr schedule treat it like AdamW. The fused QKV matrix is orthogonalised
as one matrix. Newton–Schulz runs in fp32 for reproducibility, batched over the matrices of one
shape (a small model's step is otherwise dominated by hundreds of tiny matmul launches).
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
            if group["use_muon"]:
                self._muon_update(params, group)
            else:
                for p in params:
                    self._adamw_update(p, group)

    def _muon_update(self, params: list[torch.Tensor], group: dict[str, Any]) -> None:
        by_shape: dict[tuple[int, ...], list[torch.Tensor]] = {}
        for p in params:
            by_shape.setdefault(tuple(p.shape), []).append(p)
        for shape, same_shape in by_shape.items():
            directions = torch.stack([self._momentum_direction(p, group) for p in same_shape])
            updates = newton_schulz(directions, group["ns_steps"])
            scale = RMS_MATCH * math.sqrt(max(shape))
            for p, update in zip(same_shape, updates, strict=True):
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                p.add_(update.to(p.dtype), alpha=-group["lr"] * scale)

    def _momentum_direction(self, p: torch.Tensor, group: dict[str, Any]) -> torch.Tensor:
        """Update the momentum buffer; the (Nesterov) direction to orthogonalise."""
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        buf = state["momentum_buffer"]
        buf.mul_(group["momentum"]).add_(p.grad)
        return p.grad.add(buf, alpha=group["momentum"]) if group["nesterov"] else buf

    def _adamw_update(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        if "step" not in state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
        step = float(state["step"])
        beta1, beta2 = group["betas"]
        state["exp_avg"].lerp_(p.grad, 1.0 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1.0 - beta2)
        bias1 = 1.0 - beta1**step
        bias2 = 1.0 - beta2**step
        denom = (state["exp_avg_sq"] / bias2).sqrt_().add_(group["eps"])
        p.mul_(1.0 - group["lr"] * group["weight_decay"])
        p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / bias1)
