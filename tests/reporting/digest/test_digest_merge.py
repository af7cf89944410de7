"""digest.merge: several digests → one, keeping the runs digest-report counts, cells as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.merge import merge_digests
from flashprobe.reporting.digest.report import build_digest_reports, load_digests
from flashprobe.reporting.digest.tables import render_digest_reports


def _runs(path: Path) -> list[tuple[str, int, int]]:
    return [(c.variant, c.seed, c.steps_reached) for c in load_digest(path).cells]


def test_merge_keeps_the_counted_runs_and_drops_the_superseded(tmp_path: Path, make) -> None:
    old = make.digest(tmp_path / "claim.json", [
        make.cell("a", 0, planned=100, started=1.0, diverged=40),
        make.cell("a", 1, planned=100, started=1.0, reached=60, finished=False),  # cut
    ], {"s": {"seeds": [0, 1]}})  # fmt: skip
    new = make.digest(tmp_path / "session.json", [
        make.cell("a", 1, planned=100, started=2.0),  # the cut seed again, to its end
        make.cell("b", 0, planned=100, started=2.0, diverged=70),
    ], {"s": {"seeds": [0, 1, 2]}})  # fmt: skip
    out = tmp_path / "merged.json"
    result = merge_digests([old, new], out)
    assert result.kept == 3
    (superseded,) = result.superseded
    assert (superseded.cell.variant, superseded.cell.seed, superseded.cell.steps_reached) == (
        "a", 1, 60)  # fmt: skip
    assert sorted(_runs(out)) == [("a", 0, 41), ("a", 1, 100), ("b", 0, 71)]
    merged = json.loads(out.read_text())
    assert merged["suites"] == {"s": {"seeds": [0, 1, 2]}}  # the later definition
    assert [m["file"] for m in merged["merged_from"]] == ["claim.json", "session.json"]
    # a counted cell is copied as written
    original = json.loads(new.read_text())["cells"][1]
    assert original in merged["cells"]

    # the report on the merge equals the report on the inputs
    def tables(paths: list[Path]) -> str:
        text = render_digest_reports(build_digest_reports(load_digests(paths)), "markdown")
        return re.split("## (?:Superseded|Notes)", text)[0]  # the lists of files differ

    assert tables([out]) == tables([old, new])


def test_merge_keeps_each_run_s_data_digest(tmp_path: Path, make) -> None:
    old = make.digest(tmp_path / "old.json", [make.cell("a", 0, data_digest="0" * 16)])
    new = make.digest(tmp_path / "new.json", [make.cell("a", 1, data_digest="f" * 16)])
    out = tmp_path / "merged.json"
    merge_digests([old, new], out)
    cells = json.loads(out.read_text())["cells"]
    assert [c["summary"]["environment"]["data_digest"] for c in cells] == ["0" * 16, "f" * 16]
    (report,) = build_digest_reports(load_digests([out]))
    assert any("2 different token streams" in n for n in report.notes)


def test_merge_into_one_of_its_inputs_needs_force(tmp_path: Path, make) -> None:
    claim = make.digest(tmp_path / "claim.json", [make.cell("a", 0)])
    session = make.digest(tmp_path / "session.json", [make.cell("a", 1)])
    before = claim.read_text()
    with pytest.raises(FlashprobeError, match="refusing to overwrite"):
        merge_digests([claim, session], claim)
    assert claim.read_text() == before
    merge_digests([claim, session], claim, force=True)
    assert sorted(_runs(claim)) == [("a", 0, 100), ("a", 1, 100)]


def test_merge_refuses_v1_and_a_single_input(tmp_path: Path, make) -> None:
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps([{"meta": {"suite": "q", "variant": "a", "seed": 0}}]))
    v2 = make.digest(tmp_path / "v2.json", [make.cell("a", 1)])
    out = tmp_path / "out.json"
    with pytest.raises(FlashprobeError, match="format version 1"):
        merge_digests([v1, v2], out)
    with pytest.raises(FlashprobeError, match="at least two"):
        merge_digests([v2], out)
    assert not out.exists()


def test_merge_keeps_every_input_s_store_check_notes_once(tmp_path: Path, make) -> None:
    paths = []
    for name, cell, notes in (("a.json", make.cell("a", 0), ["store check: x", "store check: y"]),
                              ("b.json", make.cell("a", 1), ["store check: y"])):  # fmt: skip
        path = make.digest(tmp_path / name, [cell])
        raw = json.loads(path.read_text())
        path.write_text(json.dumps({**raw, "notes": notes}))
        paths.append(path)
    merge_digests(paths, tmp_path / "merged.json")
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["notes"] == ["store check: x", "store check: y"]
    load_digest(tmp_path / "merged.json")  # still a digest


def test_merge_refuses_an_output_under_a_file_before_reading(tmp_path: Path, make) -> None:
    a = make.digest(tmp_path / "a.json", [make.cell("a", 0, planned=100, started=1.0)])
    b = make.digest(tmp_path / "b.json", [make.cell("a", 1, planned=100, started=2.0)])
    blocker = tmp_path / "plain-file"
    blocker.write_text("")
    with pytest.raises(FlashprobeError, match=r"merge output .*plain-file is not a folder"):
        merge_digests([a, b], blocker / "merged.json")


def test_merge_refuses_negative_steps_no_cells_and_an_output_in_a_store(tmp_path, make) -> None:
    """Each used to write a merge: -5 steps (digest-report then showed -5), an empty digest of
    inputs that hold no cells (digest-report refuses it), a file inside a result store."""
    good = make.digest(tmp_path / "good.json", [make.cell("a", 0)])
    out = tmp_path / "out.json"
    bad = make.digest(tmp_path / "bad.json", [make.cell("a", 1)])
    raw = json.loads(bad.read_text())
    raw["cells"][0]["summary"]["steps_done"] = -5
    bad.write_text(json.dumps(raw))
    with pytest.raises(FlashprobeError, match=r"summary\.steps_done must be >= 0, not -5"):
        merge_digests([good, bad], out)
    with pytest.raises(FlashprobeError, match="steps_done must be >= 0"):
        load_digests([bad])  # digest-report reads it alike
    empty = [make.digest(tmp_path / f"e{i}.json", []) for i in range(2)]
    with pytest.raises(FlashprobeError, match=r"^the digests hold no cells$"):
        merge_digests(empty, out)
    assert not out.exists()
    cell = tmp_path / "store" / "s" / "a--0"
    cell.mkdir(parents=True)
    (cell / "cell.json").write_text("{}")
    (tmp_path / "store" / "s" / "suite.json").write_text("{}")
    for inside in (cell / "m.json", cell.parent / "m.json", cell.parent.parent / "m.json"):
        with pytest.raises(FlashprobeError, match=r"merge output .* is inside the result store"):
            merge_digests([good, good], inside)
        assert not inside.exists()
    merge_digests([good, good], tmp_path / "m.json")  # beside the store: fine
