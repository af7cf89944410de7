"""Validation loss on fixed, evenly spaced windows of the validation split."""

from __future__ import annotations

import numpy as np
import torch

from flashprobe.data.sampler import batch_at, eval_offsets, rank_share
from flashprobe.model.gpt import GPT
from flashprobe.train.distributed import Distributed
from flashprobe.train.precision import autocast_context


@torch.no_grad()
def validation_loss(
    model: GPT,
    tokens: np.ndarray,
    *,
    batches: int,
    micro_batch_size: int,
    dist: Distributed,
    precision: str,
) -> float:
    """Mean loss over `batches` micro-batches; each rank evaluates its share."""
    block = model.config.block_size
    offsets = rank_share(
        eval_offsets(len(tokens), block, batches * micro_batch_size * dist.world_size),
        dist.rank,
        dist.world_size,
    )
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=dist.device)
    try:
        for start in range(0, len(offsets), micro_batch_size):
            x, y = batch_at(tokens, offsets[start : start + micro_batch_size], block, dist.device)
            with autocast_context(dist.device, precision):
                _, loss = model(x, y)
            total += loss.double()
    finally:
        model.train(was_training)
    return float(dist.mean(total / batches))
