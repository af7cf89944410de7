"""report_tables: a hand-built SuiteReport as text, markdown, CSV and JSON (no store)."""

from __future__ import annotations

import json

import pytest

from flashprobe.attribution.ranking import Roles
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.report import SuiteReport
from flashprobe.reporting.report_tables import POOLED_SHOWN, render_reports


def _report(pooled: int = 0) -> SuiteReport:
    ranking = {"rank": 1, "variant": "fp32", "design": "restore", "component": "accumulator",
               "failed": 1, "seeds": 4, "rate": 0.25, "rate_lo": 0.05, "rate_hi": 0.7,
               "steps_mean": 120.0, "steps_lo": None, "mechanism_share": 0.5, "score": None,
               "verdict": "explains"}  # fmt: skip
    split = {"value": "on", "failed": 1, "seeds": 2, "rest_failed": 0, "rest_seeds": 2,
             "fisher_p": 0.5, "adjusted_p": 1.0}  # fmt: skip
    splits = [{"switch": f"s{i}", **split} for i in range(pooled)]
    return SuiteReport(
        suite="tiny",
        roles=Roles(baseline="fa2", safe=None),
        summary=[{"variant": "fa2", "cells": 1, "final_loss": float("nan")}],
        ranking=[ranking],
        metrics=[],
        hotspots=[],
        missing=["variant fp32: not replayed (no mechanism metrics)"],
        notes=[],
        pooled=splits,
    )


def test_cells_are_formatted_per_column() -> None:
    text = render_reports([_report()], "table", wide=True)
    assert "Suite tiny" in text and "all-safe: none (add design unavailable)" in text
    assert "1/4" in text and "0.25 [0.05, 0.70]" in text  # failed k/n, rate with its interval
    assert "120" in text and "50%" in text and "nan" in text  # steps without a CI, share, NaN
    assert "(none)" in text and "- variant fp32: not replayed" in text
    assert "Notes" not in text  # no notes, no section


def test_the_pooled_screen_is_cut_in_text_but_not_in_csv_or_json() -> None:
    report = _report(pooled=POOLED_SHOWN + 2)
    md = render_reports([report], "markdown")
    assert f"| s{POOLED_SHOWN - 1} " in md and f"| s{POOLED_SHOWN} " not in md
    csv_text = render_reports([report], "csv", "pooled")
    assert csv_text.splitlines()[0].startswith("suite,switch,value,same_split")
    assert len(csv_text.strip().splitlines()) == 1 + POOLED_SHOWN + 2
    (doc,) = json.loads(render_reports([report], "json"))
    assert len(doc["pooled"]) == POOLED_SHOWN + 2 and doc["roles"]["baseline"] == "fa2"


@pytest.mark.parametrize(("fmt", "table"), [("html", "ranking"), ("csv", "cells")])
def test_an_unknown_format_or_table_is_an_error(fmt: str, table: str) -> None:
    with pytest.raises(FlashprobeError, match="must be one of"):
        render_reports([_report()], fmt, table)
