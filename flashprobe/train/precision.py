"""Mixed precision: bf16 autocast over fp32 master weights (CPU and CUDA alike)."""

from __future__ import annotations

import contextlib

import torch


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast for the forward pass; fp32 runs without autocast.

    Gradients land in the fp32 parameters' .grad (autocast casts weights per op), so the
    optimizer always updates fp32 master weights. No GradScaler: bf16 has fp32's range.
    """
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
