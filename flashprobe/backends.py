"""Which implementation runs a KernelSpec: the one backend table, used by `flashprobe.attention`,
the model's attention module, the training checks and replay.

    backend     CUDA tensors (a machine with a CUDA GPU)   elsewhere
    emulator    the PyTorch emulator                       the PyTorch emulator
    triton      the Triton kernels                         the Triton kernels, under
                                                           TRITON_INTERPRET=1 only (tests)
    auto        the Triton kernels                         the PyTorch emulator

`auto` also runs the emulator for what the kernels do not take (fp32 and fp64 tensors, the
emulator's gradcheck mode; head dims other than KERNEL_HEAD_DIMS) and where the kernels cannot
be loaded. A training run or a replay refuses `triton` on a
machine without a CUDA GPU (`machine_backend`): the interpreter is for the kernel tests.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

import torch

from flashprobe.errors import FlashprobeError

Backend = Literal["auto", "emulator", "triton"]
Implementation = Literal["emulator", "triton"]
#: backend → (implementation on CUDA, implementation elsewhere)
TABLE: dict[str, tuple[Implementation, Implementation]] = {
    "auto": ("triton", "emulator"),
    "emulator": ("emulator", "emulator"),
    "triton": ("triton", "triton"),
}
BACKENDS = tuple(TABLE)
NEEDS_CUDA = "backend triton needs a CUDA GPU"
#: What the Triton kernels take (kernels.autograd refuses the rest); `auto` runs the emulator
#: for anything else.
KERNEL_DTYPES = (torch.bfloat16, torch.float16)
KERNEL_HEAD_DIMS = (16, 32, 64, 128, 256)


def check_backend(backend: Any) -> str:
    if backend not in TABLE:
        raise FlashprobeError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    return backend


def implementation(
    backend: Any, *, cuda: bool, dtype: torch.dtype | None = None, head_dim: int | None = None
) -> Implementation:
    """What `backend` runs on CUDA (cuda=True) or elsewhere, for tensors of `dtype` and
    `head_dim` (None: not known yet, e.g. a training run's plan)."""
    chosen = TABLE[check_backend(backend)][0 if cuda else 1]
    if backend == "auto" and chosen == "triton":
        unfit = (dtype is not None and dtype not in KERNEL_DTYPES) or (
            head_dim is not None and head_dim not in KERNEL_HEAD_DIMS
        )
        if unfit or not triton_available():
            return "emulator"
    return chosen


def tensor_backend(backend: Any, q: torch.Tensor) -> Implementation:
    """What `flashprobe.attention(q, ..., backend=backend)` runs: "triton" or "emulator"."""
    return implementation(backend, cuda=q.is_cuda, dtype=q.dtype, head_dim=q.shape[-1])


def machine_backend(
    backend: Any, *, cuda: bool | None = None, instead: str = "use --backend emulator"
) -> Implementation:
    """What a run on this machine (cuda: whether it has a CUDA GPU; None: ask torch) uses;
    `triton` without a GPU is refused with a line that ends with `instead`."""
    check_backend(backend)
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if backend == "triton" and not cuda:
        raise FlashprobeError(f"{NEEDS_CUDA}; {instead}")
    return implementation(backend, cuda=cuda)


def triton_available() -> bool:
    """Whether the Triton kernels load here (triton installed, flashprobe.kernels imports)."""
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        load_triton()
    except FlashprobeError:
        return False
    return True


def load_triton() -> Any:
    """flashprobe.kernels.triton_attention, or a one-line error saying why it is missing."""
    try:
        from flashprobe.kernels import triton_attention
    except ImportError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FlashprobeError(f"the triton backend is not available: {reason}") from None
    return triton_attention
