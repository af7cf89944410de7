"""Choosing among timed launch configs (flashprobe.kernels.autotune.pick)."""

from __future__ import annotations

from dataclasses import replace

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


def test_tma_candidates_repeat_every_pointer_candidate_with_descriptor_loads() -> None:
    for head_dim in (64, 128):
        for pointer, both in [
            (autotune.fwd_candidates(head_dim), autotune.fwd_candidates(head_dim, tma=True)),
            (autotune.bwd_candidates(head_dim), autotune.bwd_candidates(head_dim, tma=True)),
            (autotune.bwd_candidates(head_dim, atomic_dq=True),
             autotune.bwd_candidates(head_dim, atomic_dq=True, tma=True)),
        ]:  # fmt: skip
            assert not any(c.tma for c in pointer)
            assert both == pointer + [replace(c, tma=True) for c in pointer]


def test_tuned_entries_store_tma_only_when_it_is_on() -> None:
    """Files tuned before `tma` existed read the same; a TMA winner round-trips."""
    assert "tma" not in tuning.config_dict(SMALL)
    on = replace(SMALL, tma=True)
    assert tuning.config_dict(on)["tma"] is True
    assert FwdConfig(**tuning.config_dict(on)) == on
    bwd = tuning.BwdConfig(32, 64, 64, 32, num_warps=4, num_stages=2, tma=True)
    assert tuning.BwdConfig(**tuning.config_dict(bwd)) == bwd
