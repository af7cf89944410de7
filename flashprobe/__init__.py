"""flashprobe: instruments for low-precision flash-attention failures (arXiv:2510.04212).

import flashprobe
o = flashprobe.attention(q, k, v, causal=True, spec="sfa")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashprobe.errors import FlashprobeError
from flashprobe.spec import PRESETS, KernelSpec, make_spec

__version__ = "0.1.0"

__all__ = ["PRESETS", "FlashprobeError", "KernelSpec", "__version__", "attention", "make_spec"]

if TYPE_CHECKING:
    from flashprobe.api import attention


def __getattr__(name: str) -> Any:
    # torch is imported on first use of the attention API, so `flashprobe --version` stays fast.
    if name == "attention":
        from flashprobe.api import attention

        return attention
    raise AttributeError(f"module 'flashprobe' has no attribute {name!r}")
