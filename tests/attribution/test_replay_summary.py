"""replay_summary.summarise: per-variant metrics pooled over replay records."""

from __future__ import annotations

import math
from typing import Any

import pytest

from flashprobe.attribution.replay_summary import pooled_relative_error, summarise


def _record(head: int, dq_rel: float, dq_norm: float | None, **extra: Any) -> dict[str, Any]:
    rec = {"variant": "v", "layer": 0, "head": head, "step": 9, "rows": 4, "delta_sum": 0.0,
           "o_mean": 0.0, "dq_rel": dq_rel, "dk_rel": dq_rel, **extra}  # fmt: skip
    if dq_norm is not None:
        rec.update(dq_ref_norm=dq_norm, dk_ref_norm=dq_norm)
    return rec


def test_gradient_errors_pool_by_the_exact_norms() -> None:
    """A head whose exact dQ is tiny has a huge relative error; pooled by norm it weighs
    what its error weighs in the whole tensor, not as much as a large head."""
    doc = {"source_cell": "s", "records": [_record(0, 0.01, 100.0), _record(1, 5.0, 1e-3)]}
    row = summarise([doc])["v"]
    expected = math.sqrt((0.01 * 100) ** 2 + (5.0 * 1e-3) ** 2) / math.sqrt(100**2 + 1e-6)
    assert row["dq_rel"] == pytest.approx(expected) and row["dq_rel"] < 0.011
    assert row["dk_rel"] == pytest.approx(expected)
    assert row["dv_rel"] is None  # not in the records


def test_older_records_without_norms_keep_the_mean() -> None:
    doc = {"source_cell": "s", "records": [_record(0, 0.01, None), _record(1, 5.0, None)]}
    assert summarise([doc])["v"]["dq_rel"] == pytest.approx(2.505)
    mixed = {"source_cell": "s", "records": [_record(0, 0.01, 100.0), _record(1, 5.0, None)]}
    assert summarise([mixed])["v"]["dq_rel"] == pytest.approx(2.505)


def test_non_finite_errors_are_left_out_as_the_means_leave_them() -> None:
    doc = {"source_cell": "s",
           "records": [_record(0, 0.02, 10.0), _record(1, float("nan"), 10.0)]}  # fmt: skip
    assert summarise([doc])["v"]["dq_rel"] == pytest.approx(0.02)


def test_pooled_relative_error_edges() -> None:
    assert pooled_relative_error([]) is None
    assert pooled_relative_error([(0.1, 0.0), (0.2, 0.0)]) is None
    assert pooled_relative_error([(None, 1.0)]) is None
    assert pooled_relative_error([(0.1, 3.0), (0.1, 4.0)]) == pytest.approx(0.1)
