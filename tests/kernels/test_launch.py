"""Launch plumbing (flashprobe.kernels.launch) that needs no kernel: the shared-memory fallback.

The kernels themselves are tested in test_triton_kernels.py; a GPU case there runs a shape
whose heuristic config does not fit in the H200's shared memory.
"""

from __future__ import annotations

import pytest
import torch
from triton.runtime.errors import OutOfResources

from flashprobe.errors import FlashprobeError
from flashprobe.kernels import launch
from flashprobe.kernels.tuning import FwdConfig

CONFIG = FwdConfig(block_m=64, sub_n=64, num_warps=4, num_stages=3, max_one_pass=128)


class FakeGpu:
    """Launches that need more shared memory than `limit` are refused, as Triton refuses them."""

    def __init__(self, limit: int) -> None:
        self.limit, self.tried = limit, []

    def launch(self, config: FwdConfig) -> None:
        self.tried.append((config.num_stages, config.max_one_pass))
        need = 100 * config.num_stages + config.max_one_pass  # stand-in for bytes
        if need > self.limit:
            raise OutOfResources(need, self.limit, "shared memory")


def test_a_config_that_does_not_fit_is_retried_smaller_and_remembered() -> None:
    gpu = FakeGpu(limit=250)
    key = ("fwd", "test-fits", 256)
    launch._launch_fitting(gpu.launch, CONFIG, key)
    assert gpu.tried == [(3, 128), (2, 128), (1, 128)]
    gpu.tried.clear()
    launch._launch_fitting(gpu.launch, CONFIG, key)
    assert gpu.tried == [(1, 128)], "the config that fitted is used straight away next time"


def test_the_key_tile_is_split_when_fewer_stages_are_not_enough() -> None:
    gpu = FakeGpu(limit=210)
    launch._launch_fitting(gpu.launch, CONFIG, ("fwd", "test-split", 256))
    assert gpu.tried[-1] == (1, 64)


def test_no_config_fits_raises_a_flashprobe_error() -> None:
    gpu = FakeGpu(limit=10)
    with pytest.raises(FlashprobeError, match="no fwd launch config fits this GPU"):
        launch._launch_fitting(gpu.launch, CONFIG, ("fwd", "test-none", 256))
    assert len(gpu.tried) == 5


def test_launch_arithmetic_matches_triton() -> None:
    import triton

    assert [launch._cdiv(a, b) for a in range(300) for b in (1, 16, 64, 128)] == [
        triton.cdiv(a, b) for a in range(300) for b in (1, 16, 64, 128)
    ]
    assert [launch._next_power_of_2(n) for n in range(5000)] == [
        triton.next_power_of_2(n) for n in range(5000)
    ]


def test_row_strides_follow_the_kernels_argument_order() -> None:
    q = torch.empty(2, 3, 5, 8)
    k = torch.empty(2, 5, 3, 8).transpose(1, 2)  # seq-major storage, as a split projection gives
    assert launch._row_strides(q, k) == (120, 40, 8, 120, 8, 24)


@pytest.mark.skipif(not launch.interpreting(), reason="the interpreter stands in for a TMA GPU")
def test_tma_loads_fit_only_rows_that_start_16_byte_aligned() -> None:
    packed = torch.zeros(2, 3, 40, 64, dtype=torch.bfloat16)
    assert launch.tma_loads_fit(packed, packed)
    buffer = torch.zeros(packed.numel() + 1, dtype=torch.bfloat16)
    shifted = buffer[1:].view(packed.shape)  # base 2 bytes past alignment
    assert not launch.tma_loads_fit(packed, shifted)
    odd_rows = torch.zeros(2, 3, 40, 68, dtype=torch.bfloat16)[..., :64]  # 136-byte rows
    assert not launch.tma_loads_fit(odd_rows)
    narrow = torch.zeros(2, 3, 40, 4, dtype=torch.bfloat16)  # an 8-byte row: below a TMA box
    assert not launch.tma_loads_fit(narrow)


@pytest.mark.skipif(not launch.interpreting(), reason="the interpreter stands in for a TMA GPU")
def test_tma_loads_keep_the_callers_scratch_allocator() -> None:
    import contextvars

    import triton
    from triton.runtime import _allocation

    def run(caller_sets_one: bool) -> object:
        def mine(size: int, alignment: int, stream: object) -> torch.Tensor:
            return torch.empty(size, dtype=torch.int8)

        if caller_sets_one:
            triton.set_allocator(mine)
        launch.tma_loads_fit(torch.zeros(1, 1, 16, 64, dtype=torch.bfloat16))
        current = _allocation._allocator.get()
        return current is mine if caller_sets_one else current

    # A fresh context each: the allocator is a context variable (per thread).
    assert contextvars.Context().run(run, True) is True
    assert contextvars.Context().run(run, False) is launch._torch_scratch
