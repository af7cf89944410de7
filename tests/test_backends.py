"""The backend table: which implementation each backend runs, on CUDA and elsewhere."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from flashprobe.backends import (
    BACKENDS,
    implementation,
    load_triton,
    machine_backend,
    tensor_backend,
)
from flashprobe.errors import FlashprobeError


@pytest.fixture
def kernels_load(monkeypatch) -> None:
    """As if the Triton kernels loaded (a CUDA machine)."""
    fake = types.ModuleType("flashprobe.kernels")
    fake.triton_attention = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashprobe.kernels", fake)


@pytest.fixture
def kernels_missing(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "flashprobe.kernels", None)  # makes the import fail


@pytest.mark.parametrize(
    ("backend", "on_cuda", "elsewhere"),
    [("auto", "triton", "emulator"), ("emulator", "emulator", "emulator"),
     ("triton", "triton", "triton")],
)  # fmt: skip
def test_the_table(kernels_load, backend: str, on_cuda: str, elsewhere: str) -> None:
    assert implementation(backend, cuda=True, dtype=torch.bfloat16) == on_cuda
    assert implementation(backend, cuda=False, dtype=torch.bfloat16) == elsewhere
    assert BACKENDS == ("auto", "emulator", "triton")


def test_auto_runs_the_emulator_for_fp64_and_without_kernels(kernels_load, monkeypatch) -> None:
    assert implementation("auto", cuda=True, dtype=torch.float64) == "emulator"
    # what the kernels refuse runs on the emulator: fp32 inputs, head dims they do not take
    assert implementation("auto", cuda=True, dtype=torch.float32) == "emulator"
    assert implementation("auto", cuda=True, dtype=torch.bfloat16, head_dim=80) == "emulator"
    assert implementation("auto", cuda=True, dtype=torch.bfloat16, head_dim=64) == "triton"
    assert implementation("triton", cuda=True, dtype=torch.float32) == "triton"  # as asked
    monkeypatch.setitem(sys.modules, "flashprobe.kernels", None)
    assert implementation("auto", cuda=True, dtype=torch.bfloat16) == "emulator"
    assert implementation("triton", cuda=True) == "triton"  # asked for: its load error says why
    with pytest.raises(FlashprobeError, match=r"^the triton backend is not available: "):
        load_triton()


def test_tensors_choose_by_their_device(kernels_load) -> None:
    q = torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16)
    assert tensor_backend("auto", q) == "emulator"  # CPU tensors
    assert tensor_backend("triton", q) == "triton"  # the kernels refuse them unless interpreted


def test_a_run_refuses_triton_without_a_gpu(kernels_missing) -> None:
    assert machine_backend("auto", cuda=False) == "emulator"
    assert machine_backend("emulator", cuda=True) == "emulator"
    assert machine_backend("auto", cuda=True) == "emulator"  # the kernels do not load here
    with pytest.raises(FlashprobeError, match=r"^backend triton needs a CUDA GPU; use --backend"):
        machine_backend("triton", cuda=False)
    with pytest.raises(FlashprobeError, match=r"needs a CUDA GPU; use backend emulator here$"):
        machine_backend("triton", cuda=False, instead="use backend emulator here")


@pytest.mark.parametrize("bad", ["cuda", "", None, "Triton"])
def test_unknown_backends_are_refused(bad) -> None:
    with pytest.raises(FlashprobeError, match=r"unknown backend .*; choose one of: auto, emu"):
        implementation(bad, cuda=False)
    with pytest.raises(FlashprobeError, match="unknown backend"):
        machine_backend(bad, cuda=True)
