"""Pooling variants by switch value, on synthetic outcomes whose split is known."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from flashprobe.attribution.pooling import SWITCHES, pooled_splits
from flashprobe.attribution.ranking import fisher_exact, outcomes

_spec = importlib.util.spec_from_file_location(
    "ranking_fixtures", Path(__file__).with_name("test_ranking.py")
)
fixtures = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules[_spec.name] = fixtures  # type: ignore[union-attr]  # its dataclass looks itself up
_spec.loader.exec_module(fixtures)  # type: ignore[union-attr]
cells = fixtures.cells

FAIL, OK = [10, 20, 30], [None, None, None]


def test_the_split_that_separates_failures_comes_first_with_its_counts() -> None:
    # Planted: every variant with a bf16 running ℓ fails, whatever else it changes.
    suite = [
        *cells("paper-like", {"accumulator": "bf16", "block_n": 128}, FAIL),
        *cells("delta", {"accumulator": "bf16", "delta_source": "o_fp32"}, FAIL),
        *cells("l-fp32", {"accumulator": "bf16", "l_accumulator": "fp32"}, OK),
        *cells("fa2", {}, OK),
        *cells("fa2-l-bf16", {"l_accumulator": "bf16"}, FAIL),
    ]
    rows = pooled_splits(suite, outcomes(suite))
    top = rows[0]
    assert (top["switch"], top["value"]) == ("l_precision", "bf16")
    assert top["variants"] == "delta, fa2-l-bf16, paper-like"
    assert (top["failed"], top["seeds"], top["rest_failed"], top["rest_seeds"]) == (9, 9, 0, 6)
    assert top["fisher_p"] == fisher_exact(9, 9, 0, 6) < 0.001
    assert top["adjusted_p"] == min(1.0, top["fisher_p"] * len(rows))
    accumulator = next(r for r in rows if r["switch"] == "accumulator")
    assert (accumulator["failed"], accumulator["seeds"]) == (6, 9)  # l-fp32 dilutes it
    assert accumulator["fisher_p"] > top["fisher_p"]
    # Every row is one side of a real split, and p values are sorted.
    assert all(r["seeds"] and r["rest_seeds"] for r in rows)
    assert [r["fisher_p"] for r in rows] == sorted(r["fisher_p"] for r in rows)


def test_switches_with_the_same_split_share_a_row_and_constants_are_skipped() -> None:
    suite = [
        *cells("a", {"softmax": "stabilized", "beta": 4.0}, FAIL),
        *cells("b", {}, OK),
    ]
    rows = pooled_splits(suite, outcomes(suite))
    assert len(rows) == 1  # softmax and beta split {a} from {b} alike; the rest are constant
    assert rows[0]["switch"] == "softmax" and rows[0]["same_split"] == "beta"
    assert rows[0]["value"] == "stabilized" and rows[0]["adjusted_p"] == rows[0]["fisher_p"]


def test_three_values_give_a_row_each_and_variants_without_outcome_are_left_out() -> None:
    suite = [
        *cells("t64", {"block_n": 64}, FAIL),
        *cells("t128", {"block_n": 128}, OK),
        *cells("full", {"block_n": None}, [5, None, None]),
        *cells("unfinished", {"block_n": 256}, OK),
    ]
    for cell in suite:
        if cell.variant == "unfinished":
            cell.summary = None
    rows = pooled_splits(suite, outcomes(suite))
    assert sorted(r["value"] for r in rows) == ["128", "64", "full"]
    assert all("unfinished" not in r["variants"] for r in rows)
    assert "l_accumulator" not in SWITCHES and "l_precision" in SWITCHES
