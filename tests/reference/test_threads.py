"""measurement_threads: the CPU thread count pinned for a block, then restored."""

from __future__ import annotations

import pytest
import torch

from flashprobe.reference.threads import MEASUREMENT_CPU_THREADS, measurement_threads


@pytest.mark.parametrize("ambient", [1, 3])
def test_the_count_is_pinned_inside_and_restored_after_even_on_error(ambient: int) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(ambient)
        with measurement_threads():
            assert torch.get_num_threads() == MEASUREMENT_CPU_THREADS
        assert torch.get_num_threads() == ambient
        with pytest.raises(RuntimeError, match="boom"), measurement_threads(2):
            assert torch.get_num_threads() == 2
            raise RuntimeError("boom")
        assert torch.get_num_threads() == ambient

        @measurement_threads()
        def measured() -> int:
            return torch.get_num_threads()

        assert measured() == MEASUREMENT_CPU_THREADS and measured() == MEASUREMENT_CPU_THREADS
        assert torch.get_num_threads() == ambient
    finally:
        torch.set_num_threads(before)
