"""Triton flash-attention kernels whose rounding points are KernelSpec switches.

`triton_attention(q, k, v, causal=..., spec=...)` is differentiable, eagerly and under
torch.compile (autograd.py, ops.py); see docs/semantics.md for what each switch rounds. The
kernels: forward.py, backward.py (with common.py); their launches: launch.py (sizes from
tuning.py, relaunches by fastlaunch.py). On CPU the kernels run only under Triton's
interpreter (TRITON_INTERPRET=1 set before this package is imported).
"""

from flashprobe.kernels.autograd import triton_attention

__all__ = ["triton_attention"]
