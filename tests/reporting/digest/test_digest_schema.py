"""digest.schema: the loader reads what the writer wrote, every old digest, and refuses the rest
with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.schema import load_digest
from flashprobe.reporting.digest.writer import build_digest, write_digest

RESULTS = Path(__file__).parents[3] / "docs" / "results"
# v1 digests are lists of cells (the other JSON files there are benchmark results)
OLD_DIGESTS = sorted(
    p for p in RESULTS.glob("*.json") if isinstance(json.loads(p.read_text()), list)
)


def test_the_committed_v1_digests_are_found() -> None:
    assert len(OLD_DIGESTS) >= 3


def test_round_trip(tiny_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    write_digest(tiny_store, out)
    raw = build_digest(tiny_store)
    digest = load_digest(out, order=3)
    assert digest.version == 3 and digest.every == 10 and set(digest.suites) == {"tiny"}
    assert len(digest.cells) == len(raw["cells"])
    for cell, entry in zip(digest.cells, raw["cells"], strict=True):
        assert cell.order == 3 and cell.source == out
        assert cell.variant == entry["meta"]["variant"] and cell.seed == entry["meta"]["seed"]
        assert cell.summary == entry["summary"] and cell.config == entry["config"]
        assert [list(r) for r in cell.loss] == entry["loss"]
        assert [r.to_dict() for r in cell.attention] == entry["attention"]
        assert [r.to_dict() for r in cell.spectral] == entry["spectral"]
        assert cell.planned_steps == 30
    by = {(c.variant, c.seed): c for c in digest.cells}
    assert by["fa2", 0].steps_reached == 30 and by["fa2", 0].reached_is_exact
    cut = by["fa2", 1]
    assert not cut.finished and not cut.reached_is_exact
    assert cut.steps_reached == max(cut.last_step + 1, cut.checkpoint_step)
    touchy = by["touchy", 0]
    assert touchy.diverged_step == touchy.summary["diverged_step"] is not None
    assert set(touchy.attention[0].max_logit) == {0, 1}  # layer keys are ints


@pytest.mark.parametrize("path", OLD_DIGESTS, ids=[p.name for p in OLD_DIGESTS])
def test_every_committed_v1_digest_loads(path: Path) -> None:
    raw = json.loads(path.read_text())
    digest = load_digest(path)
    assert digest.version == 1 and len(digest.cells) == len(raw)
    for cell, entry in zip(digest.cells, raw, strict=True):
        assert cell.variant == entry["meta"]["variant"]
        assert len(cell.loss) == len(entry["loss"])
        assert {r.step for r in cell.attention} == {r[0] for r in entry["max_logit"]}
        assert [r.wq_head_max for r in cell.spectral] == [tuple(r[1]) for r in entry["wq_spectral"]]


def test_v1_positional_records_and_later_fields(tmp_path: Path) -> None:
    cells = [
        {
            "meta": {"suite": "q", "variant": "a", "seed": 2, "key": "k"},
            "summary": None,
            "loss": [[9, 3.0, 0.5], [19, float("nan"), None]],
            "val_loss": [[19, 2.5]],
            "max_logit": [[9, {"0": 4.0, "1": None}, {"0": 3.0, "1": 2.0}],
                          [19, {"0": 5.0}, {"0": 1.0}, {"0": 0.1}, {"0": -1e-9}, {"0": -2.0}]],
            "wq_spectral": [[9, [1.0, 2.0]]],
            "qk_spectral": [[9, [1.5, 2.5], [1.1, 2.1], [0.9, 1.9]]],
            "tie_counts": [[9, {"0": [3.0, 40.0], "1": [2.0, 50.0]}]],
            "lr": 0.01,
        }
    ]  # fmt: skip
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(cells))  # NaN as a bare token, as v1 wrote it
    cell = load_digest(path).cells[0]
    assert cell.version == 1 and cell.config is None and cell.planned_steps is None
    assert cell.loss == ((9, 3.0, 0.5), (19, None, None))
    first, second = cell.attention
    assert first.max_logit == {0: 4.0, 1: None} and first.tie_events == {0: 3.0, 1: 2.0}
    assert first.p_bar_ones == {0: 40.0, 1: 50.0} and first.key_shift_leak == {}
    assert second.min_row_max == {0: -2.0} and second.softmax_sum_bias == {0: -1e-9}
    (spectral,) = cell.spectral
    assert spectral.wq == (1.5, 2.5) and spectral.wk == (1.1, 2.1)
    assert spectral.wq_head_max == (1.0, 2.0) and spectral.wk_head_max == (0.9, 1.9)
    assert cell.steps_reached == 20 and not cell.reached_is_exact
    assert cell.extra == {"lr": 0.01}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ('{"cells": []}', "not a flashprobe digest"),
        ('"a string"', "not a flashprobe digest"),
        ("[1, 2]", "cell 0 has no meta"),
        ('[{"meta": {"seed": 0}}]', "no variant"),
        ('[{"meta": {"variant": "a"}, "loss": 3}]', "loss is not a list"),
        ('[{"meta": {"variant": "a"}, "loss": [["x", 1.0]]}]', "bad step"),
        ('[{"meta": {"variant": "a"}, "loss": [[]]}]', "empty record"),
        ('[{"meta": {"variant": "a"}, "max_logit": [[9, [1, 2]]]}]', "per-layer"),
        ('[{"meta": {"variant": "a"}, "summary": [1]}]', "summary is not an object"),
        ('{"format": "flashprobe-digest", "version": 9, "cells": []}', "version 9"),
        ('{"format": "flashprobe-digest", "version": "2", "cells": []}', "bad version"),
        ('{"format": "flashprobe-digest", "version": 2, "cells": {}}', "cells is not a list"),
        ('{"format": "flashprobe-digest", "version": 2, "cells": [{"meta": {"variant": "a"},'
         ' "spectral": [{"step": 1, "wq": 3}]}]}', "per-layer list"),
    ],
)  # fmt: skip
def test_bad_digests_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(FlashprobeError, match=message) as err:
        load_digest(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_missing_folder_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(FlashprobeError, match="digest not found"):
        load_digest(tmp_path / "absent.json")
    with pytest.raises(FlashprobeError, match="is a folder"):
        load_digest(tmp_path)
    blob = tmp_path / "blob.json"
    blob.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(FlashprobeError, match="not text"):
        load_digest(blob)
