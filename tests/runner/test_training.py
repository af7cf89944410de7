"""The ablation runner on tiny CPU suites: determinism, skipping, resume after a kill, restart,
failures, branching from the source's checkpoint, captures in the store."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from runner_helpers import Recorder, all_json_parses, losses, run, suite_of
from safetensors.torch import load_file

from flashprobe.errors import FlashprobeError
from flashprobe.runner.cell_lock import cell_lock
from flashprobe.runner.plan import plan_suite, run_order
from flashprobe.runner.training import run_plan
from flashprobe.store.result_store import ResultStore
from flashprobe.train.metrics import read_jsonl


def test_same_seed_same_losses_and_finished_cells_are_skipped(tmp_path, make_suite) -> None:
    raw = make_suite()
    first = run(raw, tmp_path / "a")
    second = run(raw, tmp_path / "b")
    assert [o.status for o in first] == ["done", "done"]
    assert [o.planned.key for o in first] == [o.planned.key for o in second]
    for a, b in zip(first, second, strict=True):
        assert losses(a) == losses(b) and len(losses(a)) == 8
        assert a.summary["final_loss"] == b.summary["final_loss"]
    summary_file = first[0].planned.path / "summary.json"
    before = summary_file.stat().st_mtime_ns
    events = Recorder()
    again = run(raw, tmp_path / "a", events=events)
    assert [o.status for o in again] == ["cached", "cached"] and events.steps == []
    assert summary_file.stat().st_mtime_ns == before
    assert again[0].summary["final_loss"] == first[0].summary["final_loss"]
    other_seed = run(make_suite(seeds=[1]), tmp_path / "a")
    assert [o.status for o in other_seed] == ["done", "done"]
    assert losses(other_seed[0]) != losses(first[0])


def test_resume_after_a_kill_redoes_no_finished_work(tmp_path, make_suite) -> None:
    raw = make_suite()
    whole = run(raw, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run(raw, tmp_path / "parts", events=Recorder(at=("sfa/seed0", 6)))
    all_json_parses(tmp_path / "parts")
    with pytest.raises(FlashprobeError, match=r"sfa/seed0 was interrupted .*step 4.*--resume"):
        run(raw, tmp_path / "parts")
    with pytest.raises(FlashprobeError, match="choose one"):
        run(raw, tmp_path / "parts", resume=True, restart=True)
    events = Recorder()
    resumed = run(raw, tmp_path / "parts", events=events, resume=True)
    assert [o.status for o in resumed] == ["cached", "done"]
    assert events.steps == [("sfa/seed0", s) for s in range(4, 8)]  # from the step-4 checkpoint
    assert resumed[1].summary["resumed_from_step"] == 4
    for a, b in zip(whole, resumed, strict=True):
        assert losses(a) == losses(b)
        assert a.summary["final_loss"] == b.summary["final_loss"]
    steps = [r["step"] for r in read_jsonl(resumed[1].planned.run_dir / "metrics.jsonl")]
    assert steps == list(range(8))
    all_json_parses(tmp_path / "parts")


def test_the_summary_records_the_token_stream_in_its_environment(tmp_path, make_suite) -> None:
    raw = make_suite()
    raw["variants"] = {"fa2": {}}
    (done,) = run(raw, tmp_path)
    saved = json.loads((done.planned.path / "summary.json").read_text())
    record = json.loads((done.planned.run_dir / "config.json").read_text())
    assert isinstance(record["data_digest"], str)
    assert saved["environment"]["data_digest"] == record["data_digest"]
    assert saved["environment"]["torch"] and "data_digest" not in saved  # beside the versions
    (cached,) = run(raw, tmp_path)
    assert cached.status == "cached" and cached.summary == saved


def test_restart_starts_an_interrupted_cell_over(tmp_path, make_suite) -> None:
    raw = make_suite()
    raw["variants"] = {"fa2": {}}
    whole = run(raw, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run(raw, tmp_path / "parts", events=Recorder(at=("fa2/seed0", 5)))
    events = Recorder()
    again = run(raw, tmp_path / "parts", events=events, restart=True)
    assert events.steps == [("fa2/seed0", s) for s in range(8)]
    assert losses(again[0]) == losses(whole[0])


def test_a_failed_cell_is_reported_and_its_branches_do_not_run(tmp_path, make_suite) -> None:
    raw = make_suite(branch={"from": "fa2", "step": 4})
    outcomes = run(raw, tmp_path, events=Recorder(at=("fa2/seed0", 2), fault=RuntimeError))
    assert [o.status for o in outcomes] == ["failed", "not_run"]
    assert "RuntimeError: injected" in outcomes[0].message
    assert "branch source fa2/seed0 failed" in outcomes[1].message
    assert not (outcomes[0].planned.path / "summary.json").exists()
    retried = run(raw, tmp_path, resume=True)  # no checkpoint yet: starts over
    assert [o.status for o in retried] == ["done", "done"]


def test_branch_starts_from_the_source_checkpoint_on_the_same_data(tmp_path, make_suite) -> None:
    raw = make_suite(
        variants={"same": {"divergence": {"stop": False}}},  # trains exactly like fa2
        branch={"from": "fa2", "step": 4},
        base={"capture": {"layers": [1], "steps": [5], "max_bytes": 30_000}},
    )
    raw["variants"] = {"sfa": raw["variants"]["sfa"], "same": raw["variants"]["same"], "fa2": {}}
    suite = suite_of(raw)
    assert [c.variant for c in run_order(suite.cells)] == ["fa2", "sfa", "same"]
    source, sfa, same = run(raw, tmp_path)
    checkpoint = source.planned.run_dir / "checkpoints" / "step_0000004"
    for branched in (sfa, same):
        run_record = json.loads((branched.planned.run_dir / "config.json").read_text())
        assert Path(run_record["branched_from"]) == checkpoint and run_record["start_step"] == 4
        cell = json.loads((branched.planned.path / "cell.json").read_text())
        assert cell["source_key"] == source.planned.key and cell["branch_step"] == 4
        order = read_jsonl(branched.planned.run_dir / "data_order.jsonl")
        source_order = read_jsonl(source.planned.run_dir / "data_order.jsonl")
        assert [r["step"] for r in order] == [4, 5, 6, 7] and order == source_order[4:]
        assert sorted(losses(branched)) == [4, 5, 6, 7]
        assert branched.summary["steps_done"] == 8 and branched.summary["steps_trained"] == 4
    assert losses(same) == {s: v for s, v in losses(source).items() if s >= 4}
    assert losses(sfa) != losses(same)
    # Captures: every cell captured step 5, trimmed to the 30 kB cap.
    for outcome in (source, sfa, same):
        (capture,) = sorted((outcome.planned.run_dir / "captures").glob("*.safetensors"))
        assert capture.name == "step_0000005.safetensors" and capture.stat().st_size <= 30_000
        tensors = load_file(capture)
        assert set(tensors) == {f"layer1.{n}" for n in ("x", "q", "k", "v", "o", "lse", "do")}
        kept = tensors["layer1.q"].shape[0]
        assert 1 <= kept < 4 and tensors["layer1.q"].shape[1:] == (2, 32, 16)
        assert tensors["layer1.lse"].shape == (kept, 2, 32)
        assert tensors["layer1.x"].shape == (kept, 32, 32)  # B × T × n_embd, trimmed alike


# -- the suite definition and the post-run replay ------------------------------------------------


def test_a_shared_store_is_readable_by_the_team(tmp_path, make_suite) -> None:
    """Every file and folder a run writes has the mode open() and mkdir() give under the umask
    (group-readable under 0o002/0o022), not mkstemp's 0o600 or mkdtemp's 0o700."""
    previous = os.umask(0o002)
    try:
        raw = make_suite(base={"capture": {"layers": [1], "steps": [2]}})
        outcomes = run(raw, tmp_path)
    finally:
        os.umask(previous)
    assert [o.status for o in outcomes] == ["done", "done"]
    modes = {
        str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*")
    }
    assert any("checkpoints/step_" in p for p in modes) and any("captures" in p for p in modes)
    wrong = {
        p: oct(m) for p, m in modes.items() if m != (0o775 if (tmp_path / p).is_dir() else 0o664)
    }
    assert not wrong, sorted(wrong.items())


def _files(root: Path) -> dict[str, bytes]:
    """Every file's bytes, but the lock's (it names its latest holder)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name != ".lock"
    }


def test_a_cell_another_process_writes_is_left_alone(tmp_path, make_suite) -> None:
    """While a cell's lock is held elsewhere, no flag (run, --resume, --restart) trains it or
    deletes its output; once free, a finished cell is read back and an abandoned one needs
    --resume or --restart."""
    raw = make_suite()
    raw["variants"] = {"fa2": {}}
    with pytest.raises(KeyboardInterrupt):
        run(raw, tmp_path, events=Recorder(at=("fa2/seed0", 5)))
    store = ResultStore(tmp_path)
    cell = plan_suite(suite_of(raw), store, version="test", resume=True)[0]
    before = _files(cell.path)
    with cell_lock(cell.path):  # as another process would hold it
        for flags in ({}, {"resume": True}, {"restart": True}):
            plan = plan_suite(suite_of(raw), store, version="test", **flags)
            assert [p.action for p in plan] == ["busy"]
            assert plan[0].holder.startswith(f"pid {os.getpid()} ")
            (outcome,) = run_plan(plan, store, version="test")
            assert outcome.status == "not_run"
            assert outcome.message.startswith("busy: another process is writing it (pid ")
            assert _files(cell.path) == before
        # the holder stops without finishing: a plan made meanwhile does not take the cell over
        stale = plan_suite(suite_of(raw), store, version="test", restart=True)
    (outcome,) = run_plan(stale, store, version="test")
    assert outcome.status == "not_run" and "rerun (with --resume to continue it)" in outcome.message
    assert _files(cell.path) == before
    (resumed,) = run(raw, tmp_path, resume=True)
    assert resumed.status == "done" and resumed.summary["resumed_from_step"] == 4


def test_a_cell_finished_elsewhere_after_planning_is_read_back(tmp_path, make_suite) -> None:
    raw = make_suite()
    store = ResultStore(tmp_path / "b")
    plan = plan_suite(suite_of(raw), store, version="test")
    done = run(raw, tmp_path / "b")  # "another process" finishes both cells first
    events = Recorder()
    again = run_plan(plan, store, version="test", events=events)
    assert [o.status for o in again] == ["cached", "cached"] and events.steps == []
    assert [o.summary["final_loss"] for o in again] == [o.summary["final_loss"] for o in done]


def test_resume_skips_a_damaged_checkpoint_and_says_so(tmp_path, make_suite) -> None:
    raw = make_suite(base={"train": {"steps": 12}})
    raw["variants"] = {"fa2": {}}
    (whole,) = run(raw, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):  # checkpoints at 4 and 8
        run(raw, tmp_path / "parts", events=Recorder(at=("fa2/seed0", 9)))
    store = ResultStore(tmp_path / "parts")
    (planned,) = plan_suite(suite_of(raw), store, version="test", resume=True)
    model = planned.run_dir / "checkpoints" / "step_0000008" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-64])  # a torn copy, a disk error
    (replanned,) = plan_suite(suite_of(raw), store, version="test", resume=True)
    assert replanned.checkpoint_step == 4  # not 8 (damaged), and not 0 either
    events = Recorder()
    (resumed,) = run_plan([replanned], store, version="test", events=events)
    assert events.steps == [("fa2/seed0", s) for s in range(4, 12)]
    assert resumed.summary["resumed_from_step"] == 4
    assert resumed.message == (
        "resumed from step 4, not step 8: checkpoint step_0000008 is damaged "
        "(model.safetensors does not match its checksum)"
    )
    assert losses(resumed) == losses(whole)
    assert resumed.summary["final_loss"] == whole.summary["final_loss"]
