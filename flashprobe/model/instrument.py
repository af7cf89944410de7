"""What attention layers report when the model is instrumented.

`AttentionRecorder` is attached to every attention layer by `GPT.instrument()`. Layers give it
per-head statistics (reduced from `AttentionStats` rows; during backward, the key-gradient
shift leak from a tensor hook on K) and, for the layers asked for, the tensors X (the layer
input fed to c_attn), Q, K, V, O, LSE (forward) and dO (a tensor hook on O, filled during
backward).
Statistics accumulate over every forward inside the context (micro-batches); captured tensors
come from the first forward only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass
class LayerStats:
    """Per-head attention statistics of one layer (float64, shape [n_head]), kept on the
    attention's device until read (`to_dict`), so that recording every step adds no host sync
    per layer.

    max_logit: largest scaled attention score seen (natural units).
    min_row_max: smallest row maximum seen: a row whose scores are all very negative. The
    stabilized softmax sets the max of a row with a tied negative maximum to 0, so every P̄ of
    such a row underflows (ℓ = 0, NaN) once its maximum is below ≈ −87.
    tie_events: number of (row, key tile) pairs with a tied maximum (flashprobe kernels only).
    p_bar_ones: number of P̄ entries exactly 1 (flashprobe kernels only).
    sum_error, sum_rows: Σ of ΣP − 1 over the sampled rows, and their number, for the softmax
    the backward recomputes from the forward's lse (flashprobe kernels only; the mean is
    `softmax_sum_bias`: > 0 when a bf16 running ℓ drops the tails, see probes.bias).
    NaN marks a quantity the head's attention implementation does not measure.
    """

    max_logit: torch.Tensor
    min_row_max: torch.Tensor
    tie_events: torch.Tensor
    p_bar_ones: torch.Tensor
    sum_error: torch.Tensor
    sum_rows: torch.Tensor

    FIELDS = ("max_logit", "min_row_max", "tie_events", "p_bar_ones", "sum_error", "sum_rows")

    @classmethod
    def from_rows(
        cls,
        row_max: torch.Tensor,
        tie_events: torch.Tensor | None,
        p_bar_ones: torch.Tensor | None,
        sum_error: torch.Tensor | None = None,
    ) -> LayerStats:
        """Reduce batch × heads × rows tensors to one value per head (sum_error: batch × heads ×
        sampled rows)."""
        heads = row_max.shape[1]
        nan = torch.full((heads,), float("nan"), dtype=torch.float64, device=row_max.device)

        def total(t: torch.Tensor | None) -> torch.Tensor:  # summed in fp64, no fp64 copy
            return nan if t is None else t.detach().sum(dim=(0, 2), dtype=torch.float64)

        row_max = row_max.detach()
        extremes = torch.stack((row_max.amax(dim=(0, 2)), row_max.amin(dim=(0, 2)))).double()
        rows = nan if sum_error is None else torch.full_like(nan, sum_error[:, 0].numel())
        return cls(
            extremes[0], extremes[1], total(tie_events), total(p_bar_ones), total(sum_error), rows
        )

    @classmethod
    def concat(cls, parts: list[LayerStats], unsplit: torch.Tensor) -> LayerStats:
        """Join head groups' stats and put the heads back in order."""
        if len(parts) == 1:
            return parts[0]
        index = unsplit.to(parts[0].max_logit.device)
        return cls(
            *(
                torch.cat([getattr(p, name) for p in parts]).index_select(0, index)
                for name in cls.FIELDS
            )
        )

    def merge(self, other: LayerStats) -> LayerStats:
        return LayerStats(
            torch.maximum(self.max_logit, other.max_logit),
            torch.minimum(self.min_row_max, other.min_row_max),
            *(getattr(self, n) + getattr(other, n) for n in self.FIELDS[2:]),
        )

    def to_dict(self) -> dict[str, list[float | None]]:
        """JSON-ready per-head lists (NaN → None), read from the device in one transfer."""
        stat = dict(zip(self.FIELDS, _on_cpu(*(getattr(self, n) for n in self.FIELDS)),
                        strict=True))  # fmt: skip
        return {
            "max_logit": _clean(stat["max_logit"]),
            "min_row_max": _clean(stat["min_row_max"]),
            "tie_events": _clean(stat["tie_events"]),
            "p_bar_ones": _clean(stat["p_bar_ones"]),
            "softmax_sum_bias": _clean(stat["sum_error"] / stat["sum_rows"]),
        }


@dataclass
class KeyGradStats:
    """Per key/value head sums behind `mechanism.key_shift_leak`, pooled over micro-batches
    (float64, on the gradient's device until read).

    Σ_j dK_j is exactly 0 for any attention (softmax ignores a common shift of a row's scores),
    so whatever the backward leaves there is its numerical error, measured on every model.
    """

    leak_sq: torch.Tensor  # Σ_b ‖Σ_j dK_bj‖²
    grad_sq: torch.Tensor  # Σ_b Σ_j ‖dK_bj‖²
    along: torch.Tensor  # Σ_b −(Σ_j dK_bj)·mean_i q_bi
    lengths: torch.Tensor  # Σ_b ‖Σ_j dK_bj‖·‖mean_i q_bi‖

    @classmethod
    @torch.no_grad()
    def from_grads(cls, dk: torch.Tensor, q: torch.Tensor) -> KeyGradStats:
        """dk: batch × kv heads × seq × head_dim, q: batch × heads × seq × head_dim (a shared
        key/value head pairs with the mean query of its group); summed in fp32 (fp64 inputs:
        in fp64)."""
        work = torch.promote_types(dk.dtype, torch.float32)
        # Reductions in `work` straight from the 16-bit tensors: no full-size fp32 copies.
        leak = dk.sum(dim=2, dtype=work)
        q_mean = q.unflatten(1, (dk.shape[1], -1)).mean(dim=(2, 3), dtype=work)
        sums = torch.stack((
            leak.square().sum(dim=(0, 2)),
            torch.linalg.vector_norm(dk, dim=(0, 2, 3), dtype=work).square(),
            -(leak * q_mean).sum(dim=(0, 2)),
            (leak.norm(dim=-1) * q_mean.norm(dim=-1)).sum(dim=0),
        )).double()  # fmt: skip
        return cls(*sums.unbind(0))

    def merge(self, other: KeyGradStats) -> KeyGradStats:
        return KeyGradStats(
            self.leak_sq + other.leak_sq,
            self.grad_sq + other.grad_sq,
            self.along + other.along,
            self.lengths + other.lengths,
        )

    def to_dict(self) -> dict[str, list[float | None]]:
        """key_shift_leak = ‖Σ_j dK_j‖ / ‖dK‖ and key_shift_drift (> 0: the leak pushes every
        score of a row up) per head; None where undefined."""
        leak_sq, grad_sq, along, lengths = _on_cpu(
            self.leak_sq, self.grad_sq, self.along, self.lengths
        )
        leak = leak_sq.sqrt() / grad_sq.sqrt()
        drift = along / lengths
        return {"key_shift_leak": _clean(leak), "key_shift_drift": _clean(drift)}


class AttentionRecorder:
    """Collects per-layer stats and captured tensors while attached to a model."""

    def __init__(self, *, collect_stats: bool, capture_layers: Iterable[int] = ()) -> None:
        self.collect_stats = collect_stats
        self.capture_layers = frozenset(capture_layers)
        self.stats: dict[int, LayerStats] = {}
        self.key_grads: dict[int, KeyGradStats] = {}
        #: "layer{i}.{x,q,k,v,o,lse,do}" → CPU tensor (q/o/do: batch × heads × seq × head_dim,
        #: k/v: batch × kv heads × seq × head_dim; x: batch × seq × n_embd; lse: batch × heads ×
        #: seq).
        self.tensors: dict[str, torch.Tensor] = {}

    def wants_capture(self, layer: int) -> bool:
        return layer in self.capture_layers and f"layer{layer}.q" not in self.tensors

    def add_stats(self, layer: int, stats: LayerStats) -> None:
        previous = self.stats.get(layer)
        self.stats[layer] = stats if previous is None else previous.merge(stats)

    def watch_key_grad(self, layer: int, k: torch.Tensor, q: torch.Tensor) -> None:
        """Reduce K's gradient to `KeyGradStats` when backward reaches it."""
        if not k.requires_grad:
            return
        q = q.detach()

        def reduce(grad: torch.Tensor) -> None:
            stats = KeyGradStats.from_grads(grad, q)
            previous = self.key_grads.get(layer)
            self.key_grads[layer] = stats if previous is None else previous.merge(stats)

        k.register_hook(reduce)

    def capture(self, layer: int, **tensors: torch.Tensor) -> None:
        for name, tensor in tensors.items():
            self.tensors[f"layer{layer}.{name}"] = _to_cpu(tensor)
        o = tensors["o"]
        if o.requires_grad:
            key = f"layer{layer}.do"

            def keep_grad(grad: torch.Tensor) -> None:
                self.tensors[key] = _to_cpu(grad)

            o.register_hook(keep_grad)

    def stats_dict(self) -> dict[str, dict[str, list[float | None]]]:
        out = {str(layer): s.to_dict() for layer, s in sorted(self.stats.items())}
        for layer, grads in self.key_grads.items():
            out.setdefault(str(layer), {}).update(grads.to_dict())
        return out


def _on_cpu(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Equal-shaped tensors copied to the CPU together (one device sync)."""
    return tuple(torch.stack(tensors).cpu().unbind(0))


def _clean(t: torch.Tensor) -> list[float | None]:
    return [None if v != v else float(v) for v in t.tolist()]


def _to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True).contiguous()
