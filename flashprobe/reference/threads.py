"""One CPU thread for the numbers flashprobe measures, whatever thread count the process has.

PyTorch's CPU matmuls (MKL) change their summation order with the thread count when a batch
holds fewer matrices than threads (P·V of one head over 1,024 keys: 2, 3 and 4 threads each
give other bits than 1), and full reductions (`t.sum()`, `t.mean()` over more than 32,768 elements)
add per-thread partial sums. So the count changes the last bits of the fp64 golden, of the
emulator's fp32 sums (and through them which way a bf16 value rounds), and of every metric
derived from them. The count belongs to the process (`OMP_NUM_THREADS`, `--jobs` children,
`torch.set_num_threads` elsewhere), not to the inputs, so measurements pin it. One thread is a
count every machine has. Memory alignment did not change MKL's bits here (fp32 and fp64 inputs
at offsets of 1-7 elements, AVX-512 MKL), so no `MKL_CBWR` setting is needed.
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
