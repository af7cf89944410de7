"""flashprobe.kernels.fastlaunch: the relaunch key is at least as fine as Triton's
specialization, and a relaunch passes the same arguments `run` would.

The compiled relaunch itself runs in the GPU tests (test_a_relaunch_matches_the_first_launch in
test_triton_kernels.py); here a stand-in JITFunction records what it is given.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend

from flashprobe.kernels import fastlaunch
from flashprobe.kernels.fastlaunch import Launcher, launch_key, pointer_key

_BUFFER = torch.zeros(64, dtype=torch.float32)
SCALARS: list[Any] = [
    *(0, 1, 2, 15, 16, 17, 32, 48, 1000, 1024, -1, -16, -17),
    *(2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, -(2**31), -(2**31) - 1, 2**40),
    *(0.0, 1.0, 0.5, 2.0, 1e-3, True, False),
]
POINTERS: list[torch.Tensor] = [
    _BUFFER,
    _BUFFER[1:],
    _BUFFER[4:],
    _BUFFER.to(torch.bfloat16),
    _BUFFER.to(torch.bfloat16)[1:],
    _BUFFER.to(torch.float16)[8:],
    _BUFFER.to(torch.int32),
]


def triton_specialization(arg: Any) -> Any:
    return native_specialize_impl(BaseBackend, arg, False, True, True)


def test_arguments_triton_tells_apart_get_different_keys() -> None:
    for a, b in itertools.combinations(POINTERS, 2):
        if triton_specialization(a) != triton_specialization(b):
            assert pointer_key(a) != pointer_key(b), (a, b)
    for a, b in itertools.combinations(SCALARS, 2):
        if triton_specialization(a) != triton_specialization(b):
            assert launch_key((a,)) != launch_key((b,)), (a, b)


def test_keys_see_alignment_and_type() -> None:
    assert pointer_key(_BUFFER) != pointer_key(_BUFFER[1:])
    assert launch_key((1,)) != launch_key((1.0,)) != launch_key((True,))


class CompiledStandIn:
    def __init__(self, launches: list) -> None:
        self.launches = launches

    def __getitem__(self, grid: tuple) -> Any:
        def runner(*args: Any, stream: Any = None) -> None:
            self.launches.append(("relaunch", grid, args, stream))

        return runner


class JITFunction:  # the name Launcher checks for a compiled (not interpreted) kernel
    arg_names = ("X", "n", "scale", "BLOCK", "FLAG")

    def __init__(self) -> None:
        self.launches: list = []

    def __getitem__(self, grid: tuple) -> Any:
        def run(*args: Any, **kwargs: Any) -> CompiledStandIn:
            self.launches.append(("run", grid, args, kwargs))
            return CompiledStandIn(self.launches)

        return run


class FakeDriver:
    class active:  # mirrors triton.runtime.driver.active
        @staticmethod
        def get_current_device() -> int:
            return 0

        @staticmethod
        def get_current_stream(device: int) -> int:
            return 1234


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastlaunch, "driver", FakeDriver)


def test_a_repeated_launch_goes_to_the_compiled_kernel_with_constexprs_in_order(
    fake_driver: None,
) -> None:
    fn = JITFunction()
    launcher = Launcher(fn)
    constexprs, options = {"FLAG": True, "BLOCK": 64}, {"num_warps": 4}
    launcher((2, 3, 1), (_BUFFER,), (32, 0.5), constexprs, options)
    launcher((5, 3, 1), (_BUFFER,), (32, 0.5), constexprs, options)
    assert fn.launches[0] == ("run", (2, 3, 1), (_BUFFER, 32, 0.5), {**constexprs, **options})
    assert fn.launches[1] == ("relaunch", (5, 3, 1), (_BUFFER, 32, 0.5, 64, True), 1234)


@pytest.mark.parametrize(
    "change",
    [
        {"pointers": (_BUFFER[1:],)},  # misaligned
        {"pointers": (_BUFFER.to(torch.bfloat16),)},
        {"scalars": (48, 0.5)},  # any other value
        {"scalars": (32, 1)},  # an int where a float was
        {"constexprs": {"FLAG": False, "BLOCK": 64}},
        {"options": {"num_warps": 8}},
    ],
)
def test_a_different_specialization_goes_through_run(fake_driver: None, change: dict) -> None:
    fn = JITFunction()
    launcher = Launcher(fn)
    call = {
        "pointers": (_BUFFER,),
        "scalars": (32, 0.5),
        "constexprs": {"FLAG": True, "BLOCK": 64},
        "options": {"num_warps": 4},
    }
    launcher((1, 1, 1), **call)
    launcher((1, 1, 1), **{**call, **change})
    assert [kind for kind, *_ in fn.launches] == ["run", "run"]
    assert len(launcher.compiled) == 2


def test_the_cache_starts_over_when_full(fake_driver: None, monkeypatch) -> None:
    monkeypatch.setattr(fastlaunch, "MAX_KEYS", 3)
    launcher = Launcher(JITFunction())
    for n in range(5):
        launcher((1, 1, 1), (_BUFFER,), (n, 0.5), {"FLAG": True, "BLOCK": 64}, {})
    assert len(launcher.compiled) == 2


def test_an_interpreted_kernel_always_goes_through_run() -> None:
    class InterpretedFunction(JITFunction):
        pass

    fn = InterpretedFunction()
    launcher = Launcher(fn)
    for _ in range(2):
        launcher((1, 1, 1), (_BUFFER,), (32, 0.5), {"FLAG": True, "BLOCK": 64}, {})
    assert [kind for kind, *_ in fn.launches] == ["run", "run"]
