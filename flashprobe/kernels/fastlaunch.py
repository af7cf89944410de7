"""Relaunching a compiled Triton kernel without `JITFunction.run`'s per-call Python.

On every call, `kernel[grid](...)` binds the arguments, re-derives each one's specialization
(dtype, 16-byte alignment, divisibility by 16, == 1, 32/64-bit), builds a string cache key and
looks the compiled kernel up. `Launcher` keeps the `CompiledKernel` the first launch returns,
under a key that is finer than Triton's specialization yet cheap to build: each pointer's dtype
and 16-byte alignment, and the scalars' exact values and types. Later launches with the same
key call its C launcher directly. Under the interpreter it always goes through `run`.
"""

from __future__ import annotations

from typing import Any

import torch
from triton.runtime import driver

#: Keys kept per kernel before the cache starts over (shapes that keep changing, e.g. a
#: sequence that grows, would otherwise grow it without bound).
MAX_KEYS = 1024


def pointer_key(t: torch.Tensor) -> tuple[torch.dtype, bool]:
    """What Triton specializes a pointer argument on: its dtype and 16-byte alignment."""
    return t.dtype, t.data_ptr() % 16 == 0


def launch_key(scalars: tuple[Any, ...]) -> tuple[Any, ...]:
    """Scalars by value and type (1, 1.0 and True are one dict key but three specializations)."""
    return scalars, tuple(map(type, scalars))


class Launcher:
    """`launcher(grid, pointers, scalars, constexprs, options)` does what
    `fn[grid](*pointers, *scalars, **constexprs, **options)` does.

    pointers, then scalars: the runtime arguments, in signature order; constexprs: every
    `tl.constexpr` parameter after them, by name; options: num_warps, num_stages, ...
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.arg_names: list[str] = list(fn.arg_names)
        self.compiled: dict[tuple, Any] = {}
        # Only a real JITFunction hands back a CompiledKernel to relaunch.
        self.enabled = type(fn).__name__ == "JITFunction"

    def __call__(
        self,
        grid: tuple[int, int, int],
        pointers: tuple[torch.Tensor, ...],
        scalars: tuple[Any, ...],
        constexprs: dict[str, Any],
        options: dict[str, Any],
    ) -> None:
        if not self.enabled:
            self.fn[grid](*pointers, *scalars, **constexprs, **options)
            return
        device = driver.active.get_current_device()  # where `run` would launch
        key = (
            device,
            tuple(map(pointer_key, pointers)),
            launch_key(scalars),
            tuple(constexprs.items()),
            tuple(options.items()),
        )
        kernel = self.compiled.get(key)
        if kernel is None:
            if len(self.compiled) >= MAX_KEYS:
                self.compiled.clear()
            self.compiled[key] = self.fn[grid](*pointers, *scalars, **constexprs, **options)
            return
        tail = [constexprs[name] for name in self.arg_names[len(pointers) + len(scalars) :]]
        stream = driver.active.get_current_stream(device)
        kernel[grid](*pointers, *scalars, *tail, stream=stream)
