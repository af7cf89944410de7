"""digest.writer: a tiny CPU store → a digest that keeps what the store holds."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.outcomes import NO_OUTCOME, NOT_DIVERGED, seed_outcome
from flashprobe.reporting.digest.pooling import one_run_per_seed
from flashprobe.reporting.digest.writer import build_digest, thin, write_digest
from flashprobe.store import reader as sr
from flashprobe.store.metrics_check import store_notes
from flashprobe.store.replay_results import read_replay
from flashprobe.train.run_state import PHASES


def _strict(text: str) -> object:
    def refuse(token: str) -> None:
        raise AssertionError(f"non-strict JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _by_run(digest: dict) -> dict[tuple[str, int], dict]:
    return {(c["meta"]["variant"], c["meta"]["seed"]): c for c in digest["cells"]}


def test_the_digest_keeps_every_0_based_logged_step(tiny_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny.json"
    assert write_digest(tiny_store, out, every=10) == 3
    digest = _strict(out.read_text())
    assert digest["format"] == "flashprobe-digest" and digest["version"] == 3
    assert digest["every"] == 10 and set(digest["suites"]) == {"tiny"}
    runs = _by_run(digest)
    assert set(runs) == {("fa2", 0), ("fa2", 1), ("touchy", 0)}
    done = runs["fa2", 0]
    # logged at the 0-based steps 9, 19, 29: a thinning on step % every == 0 would keep none
    assert [row[0] for row in done["loss"]] == [9, 19, 29]
    assert done["last_step"] == 29 and done["checkpoint_step"] == 30
    assert done["summary"]["steps_done"] == 30 and done["divergence"] is None
    assert done["config"]["train"]["steps"] == 30
    assert done["environment"]["torch"] and done["started"] > 0
    assert [row[0] for row in done["val_loss"]] == [9, 19, 29]
    assert [r["step"] for r in done["attention"]] == [9, 19, 29]
    assert [r["step"] for r in done["spectral"]] == [9, 19, 29]


def test_each_run_carries_the_token_stream_it_trained_on(tiny_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny.json"
    write_digest(tiny_store, out)
    runs = _by_run(_strict(out.read_text()))
    cell = sr.read_cells(tiny_store, "tiny")[0]  # every tiny cell trains on the same corpus
    record = json.loads((cell.run_dir / "config.json").read_text())  # the run record
    assert isinstance(record["data_digest"], str)
    for run in ("fa2", 0), ("touchy", 0):
        assert runs[run]["summary"]["environment"]["data_digest"] == record["data_digest"]
    loaded = {(c.variant, c.seed): c for c in load_digest(out).cells}
    assert loaded["touchy", 0].data_digest == record["data_digest"]
    # cut: no summary, but its run record names the stream (carried in the cell's environment)
    assert runs["fa2", 1]["summary"] is None
    assert runs["fa2", 1]["environment"]["data_digest"] == record["data_digest"]
    assert loaded["fa2", 1].data_digest == record["data_digest"]
    assert sr.read_cells(tiny_store, "tiny")[0].data_digest == record["data_digest"]


def test_the_digest_reduces_heads_as_documented(tiny_store: Path) -> None:
    digest = build_digest(tiny_store, every=10)
    cells = {c.name: c for c in sr.read_cells(tiny_store)}
    for entry in digest["cells"]:
        cell = cells[f"{entry['meta']['variant']}--{entry['meta']['key']}"]
        records = sr.read_metrics(cell)
        attention = {r["step"]: r["attention"] for r in records if "attention" in r}
        spectral = {r["step"]: r["spectral"] for r in records if "spectral" in r}
        assert [r["step"] for r in entry["attention"]] == sorted(attention)
        for rec in entry["attention"]:
            raw = attention[rec["step"]]
            assert set(rec["max_logit"]) == {"0", "1"}
            for layer, stats in raw.items():
                assert rec["max_logit"][layer] == max(stats["max_logit"])
                assert rec["tie_events"][layer] == sum(stats["tie_events"])
                assert rec["p_bar_ones"][layer] == sum(stats["p_bar_ones"])
                assert rec["min_row_max"][layer] == min(stats["min_row_max"])
        for rec in entry["spectral"]:
            raw = spectral[rec["step"]]
            assert rec["wq"] == raw["wq"] and rec["wk"] == raw["wk"]
            assert rec["wq_head_max"] == [max(h) for h in raw["wq_heads"]]
            assert rec["wk_head_max"] == [max(h) for h in raw["wk_heads"]]


def test_diverged_and_cut_runs(tiny_store: Path, make) -> None:
    runs = _by_run(build_digest(tiny_store, every=10))
    touchy = runs["touchy", 0]
    step = touchy["summary"]["diverged_step"]
    assert touchy["summary"]["diverged"] and step is not None
    assert touchy["divergence"]["step"] == step
    assert step in [row[0] for row in touchy["loss"]]  # the divergence step is always kept
    cut = runs["fa2", 1]
    assert cut["summary"] is None
    assert cut["last_step"] <= make.cut_at and cut["loss"]
    assert cut["checkpoint_step"] == 10  # checkpoint_every 10; the cut came before step 20
    assert touchy["interrupted"] is None and runs["fa2", 0]["interrupted"] is None


def test_a_cut_run_carries_its_time_by_phase_and_still_counts_as_cut(
    tiny_store: Path, tmp_path: Path, make
) -> None:
    out = tmp_path / "tiny.json"
    write_digest(tiny_store, out)
    cut = _by_run(_strict(out.read_text()))["fa2", 1]
    record = cut["interrupted"]
    assert cut["summary"] is None and record["steps_done"] == make.cut_at + 1
    phases = record["time_by_phase_s"]
    assert list(phases) == list(PHASES) and phases["train"] > 0
    assert sum(phases.values()) == pytest.approx(record["wall_time_s"], abs=0.01)
    cells = {(c.variant, c.seed): c for c in load_digest(out).cells}
    loaded = cells["fa2", 1]
    assert loaded.interrupted == record and not loaded.finished and not loaded.reached_is_exact
    assert seed_outcome(loaded).status == NO_OUTCOME
    assert seed_outcome(cells["fa2", 0]).status == NOT_DIVERGED
    kept, _ = one_run_per_seed(list(cells.values()))
    assert loaded in kept  # no finished run of that seed to prefer


def test_non_finite_values_become_null(tiny_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(tiny_store, store)
    metrics = next(store.glob("tiny/fa2--*/run/metrics.jsonl"))
    metrics.write_text(metrics.read_text() + '{"step": 30, "loss": NaN, "grad_norm": Infinity}\n')
    out = tmp_path / "nan.json"
    write_digest(store, out)
    cells = _strict(out.read_text())["cells"]
    rows = [row for c in cells for row in c["loss"] if row[0] == 30]
    assert rows == [[30, None, None]]


def test_refuses_to_overwrite_unless_forced(tiny_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    out.write_text("earlier results")
    with pytest.raises(FlashprobeError, match="refusing to overwrite"):
        write_digest(tiny_store, out)
    assert out.read_text() == "earlier results"
    write_digest(tiny_store, out, force=True)
    assert _strict(out.read_text())["version"] == 3
    with pytest.raises(FlashprobeError, match="folder"):
        write_digest(tiny_store, tmp_path)


def test_refuses_an_output_inside_the_store_even_forced(tiny_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(tiny_store, store)
    suite_file = store / "tiny" / "suite.json"
    before = suite_file.read_bytes()
    with pytest.raises(FlashprobeError, match="inside the result store"):
        write_digest(store, suite_file, force=True)
    assert suite_file.read_bytes() == before
    with pytest.raises(FlashprobeError, match="inside the result store"):
        write_digest(store, store / "digest.json")
    assert not (store / "digest.json").exists()


def test_refuses_an_output_folder_under_a_file(tiny_store: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("earlier results")
    with pytest.raises(FlashprobeError, match="is not a folder"):  # was OSError: File exists
        write_digest(tiny_store, blocker / "d.json")
    assert blocker.read_text() == "earlier results"


def test_bad_stores_and_options(tmp_path: Path, tiny_store: Path) -> None:
    with pytest.raises(FlashprobeError, match="not found"):
        build_digest(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FlashprobeError, match="no cells"):
        build_digest(tmp_path / "empty")
    with pytest.raises(FlashprobeError, match="no suite 'other'"):
        build_digest(tiny_store, suite="other")
    with pytest.raises(FlashprobeError, match="--every"):
        build_digest(tiny_store, every=0)


def test_thin_keeps_one_row_per_block_first_last_and_kept_steps() -> None:
    every_step = [[s, 1.0] for s in range(100)]
    assert [r[0] for r in thin(every_step, 10)] == [0, *range(9, 100, 10)]
    every_tenth = [[s, 1.0] for s in range(9, 100, 10)]
    assert [r[0] for r in thin(every_tenth, 10)] == list(range(9, 100, 10))
    assert [r[0] for r in thin(every_tenth, 25)] == [9, 29, 49, 79, 99]
    assert [r[0] for r in thin(every_tenth, 25, keep={59})] == [9, 29, 49, 59, 79, 99]
    assert thin([], 10) == []
    assert [r[0] for r in thin([[7, math.nan]], 10)] == [7]


def test_a_replayed_run_carries_its_replay(replayed_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "replayed.json"
    assert write_digest(replayed_store, out) == 2
    digest = _strict(out.read_text())
    runs = _by_run(digest)
    assert runs["paper-code", 0]["replay"] is None  # not a replay source: no replay.json
    replay = runs["touchy", 0]["replay"]
    (cell,) = [c for c in sr.read_cells(replayed_store) if c.variant == "touchy"]
    doc = read_replay(cell)
    assert replay["source_cell"] == doc["source_cell"] == cell.name
    assert replay["steps"] == doc["steps"] and set(replay["delta"]) == {"touchy", "paper-code"}
    # small: the compact form is a few per cent of the replay.json it comes from
    assert len(json.dumps(replay)) < 0.25 * cell.replay_path.stat().st_size


def test_an_unreadable_replay_is_one_line_and_no_digest(replayed_store: Path, tmp_path) -> None:
    """A torn replay.json (a cell's or the suite's) stops the digest as it stops `report` and
    `replay`: it used to exit 0 with {"error": ...} in the cell and nothing on stderr."""
    store = tmp_path / "store"
    shutil.copytree(replayed_store, store)
    (cell,) = [c for c in sr.read_cells(store) if c.variant == "touchy"]
    good = cell.replay_path.read_text()
    out = tmp_path / "d.json"
    for path, torn in (
        (cell.replay_path, good[: len(good) // 2]),
        (cell.path.parent / "replay.json", "{torn"),
        (cell.replay_path, json.dumps({**json.loads(good), "format": "flashprobe-replay/9"})),
    ):
        before = path.read_text()
        path.write_text(torn)
        with pytest.raises(FlashprobeError, match="corrupt") as error:
            write_digest(store, out)
        assert str(path) in str(error.value) and "\n" not in str(error.value)
        assert not out.exists()
        path.write_text(before)
    assert write_digest(store, out) == 2


def test_a_folder_without_cell_json_is_a_note_of_the_digest(tiny_store: Path, tmp_path) -> None:
    store = tmp_path / "store"
    shutil.copytree(tiny_store, store)
    lost = sorted(store.glob("tiny/touchy--*"))[0]
    (lost / "cell.json").unlink()
    said: list[str] = []
    assert write_digest(store, tmp_path / "d.json", note=said.append) == 2
    expected = [f"store check: {lost}: no cell.json, so not read as a cell"]
    assert said == expected == json.loads((tmp_path / "d.json").read_text())["notes"]
    assert len(load_digest(tmp_path / "d.json").cells) == 2


@pytest.mark.parametrize("damage", ["garbage", "binary"])
def test_damaged_metrics_are_the_notes_report_gives(tiny_store: Path, tmp_path, damage) -> None:
    """A garbage line or binary content in metrics.jsonl: the digest records (and `note` is
    told) the store check `flashprobe report` lists, not a silently short loss curve."""
    store = tmp_path / "store"
    shutil.copytree(tiny_store, store)
    cell = next(c for c in sr.read_cells(store) if c.variant == "fa2" and c.finished)
    path = cell.run_dir / "metrics.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(
        lines[0] + b"not json\n" + b"".join(lines[1:]) if damage == "garbage" else b"\x00\xff" * 64
    )
    said: list[str] = []
    write_digest(store, tmp_path / "d.json", note=said.append)
    expected = store_notes(sr.read_cells(store))
    assert expected and any(cell.name in n and "corrupt line" in n for n in expected)
    assert said == expected == json.loads((tmp_path / "d.json").read_text())["notes"]
