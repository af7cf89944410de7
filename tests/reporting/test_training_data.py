"""reporting.training_data: the note for a suite that trained on more than one token stream;
and store.reader.data_digest_of, the stream a summary records."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from flashprobe.reporting.training_data import mixed_data_note
from flashprobe.store.reader import data_digest_of

A, B = "a" * 64, "b" * 16


def _run(variant: str, seed: int, digest: Any = None, point: str = "") -> SimpleNamespace:
    return SimpleNamespace(variant=variant, seed=seed, point_label=point, data_digest=digest)


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        ({"environment": {"data_digest": A}}, A),
        ({"environment": {"data_digest": None}}, None),  # a token folder
        ({"environment": {"torch": "2.13"}}, None),  # a summary from before it was recorded
        ({"environment": None}, None),
        ({"environment": {"data_digest": 5}}, None),  # not a digest
        ({"environment": {"data_digest": ""}}, None),
        ({}, None),
        (None, None),  # unfinished
    ],
)
def test_the_digest_a_summary_records(summary: Any, expected: str | None) -> None:
    assert data_digest_of(summary) == expected


def test_one_token_stream_or_unknown_ones_say_nothing() -> None:
    assert mixed_data_note([]) == []
    assert mixed_data_note([_run("fa2", 0, A), _run("fa2", 1, A), _run("sfa", 0, A)]) == []
    # runs that record none are not a second stream
    assert mixed_data_note([_run("fa2", 0, A), _run("sfa", 0), _run("sfa", 1)]) == []


def test_two_token_streams_name_their_runs_in_one_line() -> None:
    runs = [_run("fa2", 1, A), _run("fa2", 0, A), _run("fa2", 2, B), _run("sfa", 0, A),
            _run("sfa", 1), _run("sfa", 2, B, point="optimizer.lr=0.001")]  # fmt: skip
    (note,) = mixed_data_note(runs)
    assert "\n" not in note
    assert note.startswith("the runs trained on 2 different token streams")
    assert note.endswith(
        f"{A[:12]}: fa2 seeds 0,1, sfa seed 0; {B[:12]}: fa2 seed 2, sfa [optimizer.lr=0.001] "
        "seed 2"
    )
    assert "sfa seed 1" not in note  # no digest recorded: not counted either way
