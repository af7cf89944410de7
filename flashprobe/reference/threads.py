"""One CPU thread for the numbers flashprobe measures, whatever thread count the process has.

PyTorch's CPU matmuls (MKL) split a long inner sum between threads when a batch holds fewer
matrices than threads (P·V over 1,024 keys of one head: each thread sums a slice of the keys),
and full reductions (`t.sum()`, `t.mean()` over more than 32,768 elements) add per-thread
partial sums. The thread count thus changes the last bits of the fp64 golden, of the emulator's
fp32 sums (and through them which bf16 values round which way), and of every metric derived
from them. The count follows the process (`OMP_NUM_THREADS`, `--jobs`, `torch.set_num_threads`
elsewhere), not the inputs, so measurements pin it. One thread is the only count every machine
has, and MKL's one-thread path does not depend on the memory alignment of its inputs (checked
on AVX-512 MKL for offsets of 1-7 elements), so no `MKL_CBWR` setting is needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["MEASUREMENT_CPU_THREADS", "measurement_threads"]

#: PyTorch CPU threads while the golden and the replay compute what they report.
MEASUREMENT_CPU_THREADS = 1


@contextlib.contextmanager
def measurement_threads(count: int = MEASUREMENT_CPU_THREADS) -> Iterator[None]:
    """PyTorch's CPU thread count set to `count` for the block, then restored (the setting is
    process-wide; CUDA work is unaffected)."""
    before = torch.get_num_threads()
    if before == count:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
