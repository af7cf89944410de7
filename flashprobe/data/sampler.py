"""Deterministic batches: the sample offsets of step t depend only on (seed, t).

So a run can be replayed, resumed or branched from any step with exactly the data an
uninterrupted run would have seen, on any number of ranks: each step draws the whole global
batch, and rank r of a world of n takes its contiguous share.
"""

from __future__ import annotations

import numpy as np
import torch

from flashprobe.errors import FlashprobeError

_DATA_STREAM = 0xDA7A  # keeps the data stream independent of other uses of the run seed


class BatchSampler:
    def __init__(self, n_tokens: int, block_size: int, batch_size: int, seed: int) -> None:
        if n_tokens < block_size + 2:
            raise FlashprobeError(
                f"training split has {n_tokens} tokens; block_size {block_size} needs at least "
                f"{block_size + 2}"
            )
        self.n_tokens, self.block_size = n_tokens, block_size
        self.batch_size, self.seed = batch_size, seed

    def offsets(self, step: int) -> np.ndarray:
        """Start positions (int64, length batch_size) of the global batch of `step`."""
        rng = np.random.default_rng([self.seed, step, _DATA_STREAM])
        return rng.integers(0, self.n_tokens - self.block_size, size=self.batch_size)


def rank_share(offsets: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    per_rank = len(offsets) // world_size
    return offsets[rank * per_rank : (rank + 1) * per_rank]


def eval_offsets(n_tokens: int, block_size: int, count: int) -> np.ndarray:
    """Evenly spaced windows over a split: the same validation batches for every run."""
    if n_tokens < block_size + 2:
        raise FlashprobeError(
            f"validation split has {n_tokens} tokens, fewer than block_size + 2 ({block_size + 2})"
        )
    return np.linspace(0, n_tokens - block_size - 1, num=count).astype(np.int64)


def batch_at(
    tokens: np.ndarray, offsets: np.ndarray, block_size: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets (int64, len(offsets) × block_size)."""
    rows = np.stack([np.asarray(tokens[o : o + block_size + 1]) for o in offsets.tolist()])
    xy = torch.from_numpy(rows.astype(np.int64))
    x, y = xy[:, :-1], xy[:, 1:]
    if torch.device(device).type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(
            device, non_blocking=True
        )
    return x.contiguous(), y.contiguous()
