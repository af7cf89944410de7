"""digest.loader: load_digest reads what the writer wrote, every old digest, and refuses the rest
with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flashprobe.cli import main
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.writer import build_digest, write_digest

RESULTS = Path(__file__).parents[3] / "docs" / "results"
_COMMITTED = {p: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}
# v1 digests are lists of cells, later ones objects (the other JSON files there are benchmark
# results)
OLD_DIGESTS = [p for p, raw in _COMMITTED.items() if isinstance(raw, list)]
DIGESTS = [
    p
    for p, raw in _COMMITTED.items()
    if isinstance(raw, dict) and raw.get("format") == "flashprobe-digest"
]


def test_the_committed_digests_are_found() -> None:
    assert len(OLD_DIGESTS) >= 3 and len(DIGESTS) >= 5


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
        assert cell.interrupted == entry["interrupted"]
        assert [list(r) for r in cell.loss] == entry["loss"]
        assert [r.to_dict() for r in cell.attention] == entry["attention"]
        assert [r.to_dict() for r in cell.spectral] == entry["spectral"]
        assert cell.planned_steps == 30
    by = {(c.variant, c.seed): c for c in digest.cells}
    assert by["fa2", 0].steps_reached == 30 and by["fa2", 0].reached_is_exact
    cut = by["fa2", 1]
    assert not cut.finished and not cut.reached_is_exact and cut.interrupted is not None
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


@pytest.mark.parametrize("path", DIGESTS, ids=[p.name for p in DIGESTS])
def test_every_committed_digest_loads(path: Path) -> None:
    raw = json.loads(path.read_text())
    digest = load_digest(path)
    assert digest.version == raw["version"] and len(digest.cells) == len(raw["cells"])


def _typed_digest(make: Any) -> dict[str, Any]:
    """A v3 digest of a diverged and a finished run, with every null the writer writes."""
    diverged, done = make.cell("a", 0, diverged=50), make.cell("a", 1)
    for cell in (diverged, done):
        cell["meta"] |= {"branch_from": None, "branch_step": None, "source_key": None}
        cell["summary"] |= {"status": "done", "final_loss": 2.5, "final_val_loss": None,
                            "divergence_rule": None,
                            "environment": {"torch": "2.13", "data_digest": None}}  # fmt: skip
        cell["checkpoint_step"] = cell["replay"] = cell["environment"] = None
        cell["interrupted"] = None  # finished
        cell["config"]["capture"] = None  # the store reads a null config section
    diverged["environment"] = {"torch": "2.13", "data_digest": None}  # a token folder's run
    return {"format": "flashprobe-digest", "version": 3, "store": "/tmp/x", "every": 10,
            "written_by": {"flashprobe": "0.1.0"}, "suites": {"s": {"name": "s"}},
            "cells": [diverged, done]}  # fmt: skip


def test_the_well_typed_digest_loads(tmp_path: Path, make: Any) -> None:
    path = tmp_path / "good.json"
    path.write_text(json.dumps(_typed_digest(make)))
    first, second = load_digest(path).cells
    assert first.diverged_step == 50 and first.planned_steps == 100 and first.seed == 0
    assert second.diverged_step is None and second.suite == "s" and second.point == ()


#: A field of cell 0 (suites.NAME: of the digest) with a wrong type → the end of the error.
WRONG_TYPES = [
    ("meta.seed", "zero", 'meta.seed must be an integer, not "zero"'),
    ("meta.seed", None, "meta.seed must be an integer, not null"),
    ("meta.seed", [1], r"meta.seed must be an integer, not \[1\]"),
    ("meta.seed", True, "meta.seed must be an integer, not true"),
    ("meta.point", "x", 'meta.point must be a list, not "x"'),
    ("meta.point", [["lr"]], r"meta.point must be a list of \[name, value\] pairs"),
    ("config.train", "x", 'config.train must be an object or null, not "x"'),
    ("config.divergence", 5, "config.divergence must be an object or null, not 5"),
    ("config.train.steps", "many", 'config.train.steps must be an integer, not "many"'),
    ("summary.diverged_step", "x", 'summary.diverged_step must be an integer or null, not "x"'),
    ("meta.branch_step", "x", 'meta.branch_step must be an integer or null, not "x"'),
    ("meta.suite", None, "meta.suite must be a string, not null"),
    ("meta.variant", 5, "meta.variant must be a string, not 5"),
    ("suites.s", 5, "suites.s must be an object, not 5"),
    ("interrupted", 5, "interrupted must be an object or null, not 5"),
    ("summary.environment", "x", 'summary.environment must be an object or null, not "x"'),
    (
        "summary.environment.data_digest",
        5,
        "summary.environment.data_digest must be a string or null, not 5",
    ),
    ("environment", 5, "environment must be an object or null, not 5"),
    ("environment.data_digest", [], r"environment.data_digest must be a string or null, not \[\]"),
]
WRONG_IDS = [f"{field}={json.dumps(value)}" for field, value, _ in WRONG_TYPES]


def _wrongly_typed(make: Any, tmp_path: Path, field: str, value: Any) -> Path:
    raw = _typed_digest(make)
    *parents, key = field.split(".")
    target = raw if parents[:1] == ["suites"] else raw["cells"][0]
    for part in parents:
        target = target[part]
    target[key] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(("field", "value", "message"), WRONG_TYPES, ids=WRONG_IDS)
def test_wrongly_typed_fields_are_one_line_errors(
    tmp_path: Path, make: Any, field: str, value: Any, message: str
) -> None:
    path = _wrongly_typed(make, tmp_path, field, value)
    where = "" if field.startswith("suites.") else "cell 0: "
    with pytest.raises(FlashprobeError, match=f"\\({where}{message}\\)$") as err:
        load_digest(path)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"not a flashprobe digest: {path} (")


@pytest.mark.parametrize(("field", "value", "message"), WRONG_TYPES, ids=WRONG_IDS)
def test_digest_report_and_merge_refuse_wrongly_typed_fields(
    tmp_path: Path,
    make: Any,
    capsys: pytest.CaptureFixture[str],
    field: str,
    value: Any,
    message: str,
) -> None:
    bad = _wrongly_typed(make, tmp_path, field, value)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_typed_digest(make)))
    out = tmp_path / "merged.json"
    for args in (["digest-report", str(bad)], ["digest-merge", str(out), str(good), str(bad)]):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        err = capsys.readouterr().err
        assert exit_.value.code == 2, err
        assert err.count("\n") == 1 and "not a flashprobe digest" in err and field in err
    assert not out.exists()
