"""PyTorch reference implementations: the rounding emulator (ground truth for the Triton kernels)
and the fp64 golden attention that errors are measured against."""

from flashprobe.reference.emulator import ForwardResult, emulate_forward, online_softmax_forward
from flashprobe.reference.emulator_backward import BackwardResult, emulate_backward
from flashprobe.reference.golden import (
    GoldenBackward,
    GoldenForward,
    golden_backward,
    golden_forward,
)

__all__ = [
    "BackwardResult",
    "ForwardResult",
    "GoldenBackward",
    "GoldenForward",
    "emulate_backward",
    "emulate_forward",
    "golden_backward",
    "golden_forward",
    "online_softmax_forward",
]
