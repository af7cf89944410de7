"""Kernel tests run on CPU through Triton's interpreter, which is chosen when a kernel is
decorated: so TRITON_INTERPRET must be set before `flashprobe.kernels` is first imported.
On a machine with CUDA it is left alone, and the GPU tests (`pytest -m gpu`) run compiled."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
