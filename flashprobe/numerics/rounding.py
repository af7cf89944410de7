"""Rounding to a 16-bit dtype at the points a KernelSpec names, and nowhere else."""

from __future__ import annotations

import torch

from flashprobe.spec import Precision


def low_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """The 16-bit dtype a "bf16" precision field rounds to: fp16 for fp16 inputs, else bf16."""
    return torch.float16 if dtype == torch.float16 else torch.bfloat16


def round_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round `x` to `dtype` (round-to-nearest-even) and return it in x's own dtype."""
    return x.to(dtype).to(x.dtype)


def apply_precision(x: torch.Tensor, precision: Precision, low: torch.dtype) -> torch.Tensor:
    """Round an fp32 intermediate to `low` when the spec asks for "bf16"; keep it otherwise."""
    return round_to(x, low) if precision == "bf16" else x
