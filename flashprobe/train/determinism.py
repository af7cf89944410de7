"""What makes a run's numbers repeat: pinned CPU threads, deterministic kernels, per-step seeds."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import torch

_TORCH_STREAM = 0x70C4  # the per-step torch seed stream, independent of the data stream


@contextlib.contextmanager
def cpu_threads(count: int) -> Iterator[None]:
    """PyTorch's CPU thread count pinned for the block (train.cpu_threads), then restored: a
    run's numbers must not depend on how many cores a process was given (--jobs, a scheduler)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def set_deterministic(on: bool) -> None:
    """Deterministic PyTorch algorithms for this process (cuBLAS needs a fixed workspace, read
    when its handle is created, hence the environment variable set first)."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on, warn_only=True)
    torch.backends.cudnn.deterministic = on


def step_seed(seed: int, step: int, rank: int) -> int:
    """The torch seed of one step on one rank: resuming or branching replays it exactly."""
    return int(np.random.SeedSequence([seed, step, rank, _TORCH_STREAM]).generate_state(1)[0])
