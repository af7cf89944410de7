"""Text tables that fit a width (flashprobe.reporting.render.fit_table) and wrapped prose."""

from __future__ import annotations

from flashprobe.reporting.render import fill, fit_table

HEADERS = ["variant", *(f"metric {i}" for i in range(12)), "verdict"]
BODY = [
    ["paper-code", *(f"{i}.25e-05" for i in range(12)), "less logit runaway, " * 6],
    ["fa2", *("-" for _ in range(12)), "not sufficient"],
]


def test_a_wide_table_splits_into_parts_that_repeat_the_key_column() -> None:
    text = fit_table(BODY, HEADERS, keep=1, width=100, wrap=[13])
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    parts = text.split("\n\n")
    assert len(parts) >= 2
    assert all(part.startswith("variant") for part in parts)  # the key column in every part
    for header in HEADERS:  # nothing dropped
        assert header in text
    assert text.count("paper-code") == len(parts)
    for i in range(12):
        assert f"{i}.25e-05" in text
    assert "less logit runaway," in text and "not sufficient" in text


def test_a_table_that_fits_stays_one_table() -> None:
    body = [["fa2", "1", "2"]]
    text = fit_table(body, ["variant", "a", "b"], width=100)
    assert "\n\n" not in text and text.splitlines()[2].split() == ["fa2", "1", "2"]


def test_fill_wraps_prose_and_none_keeps_one_line() -> None:
    words = "Method: " + "one factor at a time " * 20
    wrapped = fill(words, 60, indent="  ")
    assert max(len(line) for line in wrapped.splitlines()) <= 60
    assert all(line.startswith("  ") for line in wrapped.splitlines()[1:])
    assert fill(words, None) == words
