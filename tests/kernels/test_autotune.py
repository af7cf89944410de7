"""Choosing among timed launch configs (flashprobe.kernels.autotune.pick)."""

from __future__ import annotations

from flashprobe.kernels import autotune, tuning
from flashprobe.kernels.tuning import FwdConfig

SMALL = FwdConfig(block_m=64, sub_n=64, num_warps=4, num_stages=3)
LARGE = FwdConfig(block_m=128, sub_n=64, num_warps=8, num_stages=3)


def test_the_fastest_wins_without_an_incumbent() -> None:
    assert autotune.pick([(SMALL, 1.0), (LARGE, 1.001)], None) == SMALL


def test_the_incumbent_stays_unless_beaten_by_the_margin() -> None:
    close = 1.0 - autotune.SEQ_MARGIN / 2
    assert autotune.pick([(SMALL, close), (LARGE, 1.0)], LARGE) == LARGE
    clear = 1.0 - 2 * autotune.SEQ_MARGIN
    assert autotune.pick([(SMALL, clear), (LARGE, 1.0)], LARGE) == SMALL


def test_an_incumbent_that_was_not_timed_loses() -> None:
    assert autotune.pick([(SMALL, 1.0)], LARGE) == SMALL


def test_register_capped_candidates_only_where_two_blocks_can_fit() -> None:
    capped = [c for c in autotune.fwd_candidates(64) if c.max_registers is not None]
    assert capped and all(c.max_registers == 128 and c.num_warps == 8 for c in capped)
    assert not [c for c in autotune.fwd_candidates(128) if c.max_registers is not None]


def test_atomic_dq_candidates_include_the_heuristic() -> None:
    for head_dim in (64, 128):
        atomic = autotune.bwd_candidates(head_dim, atomic_dq=True)
        assert atomic != autotune.bwd_candidates(head_dim)
        assert all((c.block_m2, c.block_n2) == (c.block_m1, c.block_n1) for c in atomic)
        assert tuning.atomic_dq_heuristic(head_dim, False) in atomic
