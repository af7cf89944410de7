"""The replay after a run: on what finished, cached when unchanged, skipped without a baseline."""

from __future__ import annotations

import json

from runner_helpers import Recorder, suite_of

from flashprobe.runner.plan import plan_suite
from flashprobe.runner.replay_after_run import replay_finished
from flashprobe.runner.training import run_plan
from flashprobe.store import reader as sr
from flashprobe.store.replay_results import read_replay
from flashprobe.store.result_store import ResultStore


def test_replay_after_the_run_uses_what_finished(tmp_path, make_suite) -> None:

    raw = make_suite(
        seeds=[0, 1],
        base={"capture": {"layers": [1], "steps": [5], "max_bytes": 100_000}},
        replay={"baseline": "fa2", "safe": "sfa", "variants": ["fa2", "sfa"]},
    )
    store = ResultStore(tmp_path)
    suite = suite_of(raw)
    plan = plan_suite(suite, store, version="test")
    # sfa/seed1 fails: the replay still runs, on fa2's two finished cells
    outcomes = run_plan(
        plan, store, version="test", events=Recorder(("sfa/seed1", 2), RuntimeError)
    )
    assert [o.status for o in outcomes] == ["done", "done", "done", "failed"]
    replay = replay_finished(store, suite, outcomes)
    assert replay.status == "replayed" and replay.suite_file == str(
        tmp_path / "tiny" / "replay.json"
    )
    assert [c["status"] for c in replay.cells] == ["replayed", "replayed"]
    assert "2 variants on the captures of 2 fa2 cells (2 replayed)" in replay.message
    doc = json.loads((tmp_path / "tiny" / "replay.json").read_text())
    assert doc["roles"]["baseline"] == "fa2" and doc["roles"]["safe"] == "sfa"
    assert doc["weight_gradient"] == "dW = dQᵀX"  # real captures hold the layer input X
    failed = next(o for o in outcomes if o.status == "failed")
    assert read_replay(sr.CellView(failed.planned.path, {}, {}, None)) is None
    assert replay_finished(store, suite, outcomes).status == "cached"

    # the baseline finished nothing: nothing to replay on
    only_sfa = [o for o in outcomes if o.planned.cell.variant == "sfa"]
    skipped = replay_finished(store, suite, only_sfa)
    assert skipped.status == "skipped" and "baseline fa2 finished no cell" in skipped.message
    assert replay_finished(store, suite_of(make_suite()), outcomes).status == "skipped"


def test_a_run_that_found_cells_busy_elsewhere_leaves_the_replay_to_a_rerun(
    tmp_path, make_suite
) -> None:
    """Its replay would leave out the cells another process trains (and write a suite replay
    that names only some sources): skipped, saying why; the rerun replays them all."""
    import dataclasses

    raw = make_suite(
        base={"capture": {"layers": [1], "steps": [5], "max_bytes": 100_000}},
        replay={"baseline": "fa2"},
    )
    store = ResultStore(tmp_path)
    suite = suite_of(raw)
    outcomes = run_plan(plan_suite(suite, store, version="test"), store, version="test")
    busy = [dataclasses.replace(outcomes[0], status="not_run", busy=True,
                                message="busy: another process"), *outcomes[1:]]  # fmt: skip
    skipped = replay_finished(store, suite, busy)
    assert skipped.status == "skipped"
    assert skipped.message.startswith(f"1 cells were being trained by another process "
                                       f"({outcomes[0].planned.cell.name} first)")  # fmt: skip
    assert not (tmp_path / "tiny" / "replay.json").exists()
    assert replay_finished(store, suite, outcomes).status == "replayed"
