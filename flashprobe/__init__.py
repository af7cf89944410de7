"""flashprobe: instruments for low-precision flash-attention failures (arXiv:2510.04212).

import flashprobe
o = flashprobe.attention(q, k, v, causal=True, spec="sfa")
o = flashprobe.sdpa(q, k, v, is_causal=True, spec="paper-code")   # F.sdpa's signature
with flashprobe.patch_sdpa(spec="paper-code"):                  # an existing model's SDPA calls
    logits = model(idx)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashprobe.errors import FlashprobeError
from flashprobe.spec import PRESETS, KernelSpec, make_spec

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "FlashprobeError",
    "KernelSpec",
    "__version__",
    "attention",
    "make_spec",
    "patch_sdpa",
    "sdpa",
]

if TYPE_CHECKING:
    from flashprobe.api import attention
    from flashprobe.dropin import patch_sdpa, sdpa

_LAZY = {
    "attention": "flashprobe.api",
    "sdpa": "flashprobe.dropin",
    "patch_sdpa": "flashprobe.dropin",
}


def __getattr__(name: str) -> Any:
    # torch is imported on first use of the attention API, so `flashprobe --version` stays fast.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'flashprobe' has no attribute {name!r}")
