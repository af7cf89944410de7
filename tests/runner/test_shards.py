"""Shards: units in run order, a partition of the cells, branches kept with their source."""

from __future__ import annotations

import re

import pytest
from runner_helpers import suite_of

from flashprobe.errors import FlashprobeError
from flashprobe.runner.plan import run_order
from flashprobe.runner.prepare import select_variants
from flashprobe.runner.shards import parse_shard, select_shard, shard_numbers


def test_shards_partition_the_cells_and_keep_branches_with_their_source(make_suite) -> None:
    raw = make_suite(
        seeds=[0, 1, 2], axes={"optimizer.lr": [1e-3, 2e-3]}, branch={"from": "fa2", "step": 4}
    )
    raw["variants"]["same"] = {}
    suite = suite_of(raw)
    numbers = shard_numbers(suite.cells)
    assert len(suite.cells) == 18 and len(set(numbers.values())) == 6
    ordered = run_order(suite.cells)
    groups_in_order = list(dict.fromkeys(c.group for c in ordered))
    assert all(numbers[c.name] == groups_in_order.index(c.group) for c in ordered)
    for count in (1, 2, 4, 7):
        shards = [select_shard(suite, index, count).cells for index in range(count)]
        names = [c.name for cells in shards for c in cells]
        assert sorted(names) == sorted(c.name for c in suite.cells)  # a partition: no cell twice
        for index, cells in enumerate(shards):
            groups = {c.group for c in cells}
            assert all(numbers[c.name] % count == index for c in cells)
            for group in groups:  # each group whole: the branch source, then its branches
                members = [c.variant for c in run_order(cells) if c.group == group]
                assert members == ["fa2", "sfa", "same"]
    assert select_shard(suite, 0, 1) == suite
    assert [len(c) for c in shards] == [3, 3, 3, 3, 3, 3, 0]  # 6 groups over 7 shards
    first = select_shard(suite, 1, 4).cells  # groups 1 and 5: (lr 1e-3, seed 1), (2e-3, seed 2)
    assert sorted({(c.point[0][1], c.seed) for c in first}) == [(1e-3, 1), (2e-3, 2)]
    # with --variant: the source stays, and in the same shard
    picked = select_shard(select_variants(suite, ["sfa"]), 0, 2)
    assert [c.variant for c in run_order(picked.cells)] == ["fa2", "sfa"] * 3


def test_without_a_branch_every_cell_is_its_own_shard_unit(make_suite) -> None:
    """Independent runs spread cell by cell: 2 variants × 3 seeds fill 6 processes."""
    suite = suite_of(make_suite(seeds=[0, 1, 2]))
    assert not any(c.branch_from for c in suite.cells) and len(suite.cells) == 6
    assert sorted(shard_numbers(suite.cells).values()) == list(range(6))
    shards = [select_shard(suite, index, 6).cells for index in range(6)]
    assert [len(cells) for cells in shards] == [1] * 6
    assert sorted(c.name for cells in shards for c in cells) == sorted(c.name for c in suite.cells)
    assert [len(select_shard(suite, i, 4).cells) for i in range(4)] == [2, 2, 1, 1]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("x", "--shard must be K/N, e.g. 0/3"),
        ("1", "--shard must be K/N"),
        ("-1/2", "--shard must be K/N"),
        ("1/2/3", "--shard must be K/N"),
        ("3/3", "--shard 3/3: K must be below N (0-based: 0..2)"),
        ("0/0", "--shard 0/0: N must be at least 1"),
    ],
)
def test_bad_shards_are_refused(text: str, needle: str, make_suite) -> None:
    with pytest.raises(FlashprobeError, match=re.escape(needle)):
        parse_shard(text)
    assert parse_shard(" 2/5 ") == (2, 5)
    with pytest.raises(FlashprobeError, match="K must be below N"):
        select_shard(suite_of(make_suite()), 2, 2)
