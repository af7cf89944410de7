"""run_suite and plan_run: the ablate command as a Python call (plan, train, replay, result)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flashprobe.errors import FlashprobeError, RunStopped
from flashprobe.runner.suite_run import SuiteRequest, plan_run, run_suite
from flashprobe.runner.training import SuiteEvents


class Events(SuiteEvents):
    """What a display sees: finished cells, the end of training, replay lines; raises `fault`
    at step `at` of the first cell."""

    def __init__(self, at: int | None = None) -> None:
        self.seen: list[str] = []
        self.at = at

    def step(self, record) -> None:
        if record["step"] == self.at:
            raise KeyboardInterrupt

    def cell_finished(self, outcome) -> None:
        self.seen.append(f"cell {outcome.planned.cell.name} {outcome.status}")

    def suite_finished(self) -> None:
        self.seen.append("training over")

    def replay_progress(self, message: str) -> None:
        self.seen.append(f"replay: {message.strip()}")


def write(tmp_path: Path, raw) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps(raw))
    return str(path)


def test_run_suite_trains_replays_and_reports(tmp_path, make_suite) -> None:
    raw = make_suite(
        base={"capture": {"layers": [1], "steps": [5], "max_bytes": 100_000}},
        replay={"baseline": "fa2", "backend": "emulator"},
    )
    request = SuiteRequest(write(tmp_path, raw), store=tmp_path / "store")
    events = Events()
    run = run_suite(request, events=events)
    assert run is not None and run.ok and run.suite == "tiny"
    assert [o.status for o in run.outcomes] == ["done", "done"]
    assert events.seen[:3] == ["cell fa2/seed0 done", "cell sfa/seed0 done", "training over"]
    assert any(line.startswith("replay: replaying 2 variants on fa2--") for line in events.seen)
    assert run.replay is not None and run.replay.status == "replayed"
    assert (tmp_path / "store" / "tiny" / "suite.json").is_file()
    document = run.to_dict()
    assert document["store"] == str(tmp_path / "store" / "tiny")
    assert [c["variant"] for c in document["cells"]] == ["fa2", "sfa"]
    assert document["cells"][0]["summary"]["steps_done"] == 8
    assert document["replay"]["status"] == "replayed"
    again = run_suite(request)  # finished cells are read back, the replay is cached
    assert [o.status for o in again.outcomes] == ["cached", "cached"]
    assert again.replay.status == "cached"
    assert [r["final_loss"] for r in again.rows()] == [r["final_loss"] for r in run.rows()]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_plan_run_writes_nothing_and_lists_what_it_cannot_check(tmp_path, make_suite) -> None:
    raw = make_suite(replay={"backend": "triton"})  # needs CUDA: refused by a real run here
    request = SuiteRequest(write(tmp_path, raw), store=tmp_path / "store")
    planned = plan_run(request, dry_run=True)
    assert [p.action for p in planned.cells] == ["run", "run"]
    assert planned.problems == (
        "replay: backend triton needs a CUDA GPU; --set replay.backend=emulator, or --no-replay",
    )
    assert [r["tokens"] for r in planned.rows()] == [8 * 4 * 32] * 2
    assert not (tmp_path / "store").exists()
    with pytest.raises(FlashprobeError, match="backend triton needs a CUDA GPU"):
        run_suite(request)
    assert not (tmp_path / "store").exists()
    # --no-replay: the replay's machine is not this run's concern (the dry run said so too)
    quiet = SuiteRequest(request.config, store=tmp_path / "store", replay=False)
    assert plan_run(quiet, dry_run=True).problems == ()
    assert [p.action for p in plan_run(quiet).cells] == ["run", "run"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_dry_run_of_some_variants_checks_the_replay_of_the_whole_suite(
    tmp_path, make_suite
) -> None:
    raw = make_suite(replay={"baseline": "fa2", "safe": "sfa"})
    request = SuiteRequest(write(tmp_path, raw), store=tmp_path / "store", variants=("sfa",))
    assert plan_run(request, dry_run=True).problems == ()
    raw = make_suite(replay={"baseline": "fa2", "backend": "triton"})
    request = SuiteRequest(write(tmp_path, raw), store=tmp_path / "store", variants=("sfa",))
    assert plan_run(request, dry_run=True).problems == (
        "replay: backend triton needs a CUDA GPU; --set replay.backend=emulator, or --no-replay",
    )
    request = SuiteRequest(
        write(tmp_path, raw), store=tmp_path / "s", variants=("sfa",), replay=False
    )
    assert plan_run(request, dry_run=True).problems == ()


def test_the_data_is_checked_for_the_selected_variants_only(tmp_path, make_suite) -> None:
    """A variant not selected with --variant may name a token folder this machine lacks."""
    elsewhere = {"data": {"source": "bin", "path": str(tmp_path / "owt")}}
    raw = make_suite(variants={"owt": elsewhere})
    request = SuiteRequest(write(tmp_path, raw), store=tmp_path / "store", variants=("fa2",))
    assert [p.cell.variant for p in plan_run(request).cells] == ["fa2"]
    assert plan_run(request, dry_run=True).problems == ()
    with pytest.raises(FlashprobeError, match=r"owt.*(data folder not found|no train\.bin)"):
        plan_run(SuiteRequest(request.config, store=tmp_path / "store", variants=("owt",)))


def test_a_shard_plans_its_cells_and_does_not_replay(tmp_path, make_suite) -> None:
    raw = make_suite(replay={"backend": "emulator"})
    said: list[str] = []
    request = SuiteRequest(write(tmp_path, raw), store=tmp_path / "store", shard="1/2")
    planned = plan_run(request, say=said.append)
    assert [p.cell.name for p in planned.cells] == ["sfa/seed0"] and planned.replay is None
    assert said == [
        f"replay: not in a shard; run `flashprobe replay {tmp_path / 'store'} --suite tiny` "
        "once every shard is done"
    ]
    with pytest.raises(FlashprobeError, match="give --shard or --jobs, not both"):
        plan_run(SuiteRequest(request.config, shard="0/2", jobs=2))


def test_the_suites_jobs_apply_unless_jobs_or_a_shard_or_torchrun_say_otherwise(
    tmp_path, make_suite, monkeypatch
) -> None:
    config = write(tmp_path, {**make_suite(), "jobs": 2})
    assert plan_run(SuiteRequest(config, store=tmp_path / "s")).jobs == 2
    assert plan_run(SuiteRequest(config, store=tmp_path / "s", jobs=1)).jobs == 1
    assert plan_run(SuiteRequest(config, store=tmp_path / "s", jobs=3)).jobs == 3
    assert plan_run(SuiteRequest(config, store=tmp_path / "s", shard="0/2")).jobs == 1
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun has its own processes
    assert plan_run(SuiteRequest(config, store=tmp_path / "s")).jobs == 1


def test_ctrl_c_stops_the_run_with_exit_code_130(tmp_path, make_suite) -> None:
    request = SuiteRequest(write(tmp_path, make_suite()), store=tmp_path / "store")
    events = Events(at=6)
    with pytest.raises(RunStopped, match="rerun with --resume") as stopped:
        run_suite(request, events=events)
    assert stopped.value.exit_code == 130
    assert events.seen == ["training over"]  # the display is closed before the message
    with pytest.raises(FlashprobeError, match="fa2/seed0 was interrupted"):
        run_suite(request)
    resumed = run_suite(SuiteRequest(request.config, store=request.store, resume=True))
    assert [o.status for o in resumed.outcomes] == ["done", "done"]
    assert resumed.outcomes[0].summary["resumed_from_step"] == 4  # the step-4 checkpoint


def test_a_failed_cell_makes_the_run_not_ok(tmp_path, make_suite) -> None:
    raw = make_suite(base={"train": {"steps": 4, "checkpoint_every": 2}})
    request = SuiteRequest(write(tmp_path, raw), store=tmp_path / "store")

    class Failing(SuiteEvents):
        def step(self, record) -> None:
            raise RuntimeError("boom")

    run = run_suite(request, events=Failing())
    assert [o.status for o in run.outcomes] == ["failed", "failed"] and not run.ok
    assert run.outcomes[0].message == "RuntimeError: boom"


def test_jobs_spread_over_gpus_only_for_cells_that_train_on_one(
    tmp_path, make_suite, monkeypatch
) -> None:
    """--jobs hands the shards to parallel.spread_over_gpus when a cell to train is not pinned
    to the CPU (device cuda or auto); CPU suites keep the parent's CUDA_VISIBLE_DEVICES."""
    from flashprobe.runner import suite_run

    seen: list[list[str | None]] = []
    monkeypatch.setattr(suite_run, "visible_gpus", lambda: ["4", "6"])
    monkeypatch.setattr(
        suite_run, "run_shards", lambda shards, say: seen.append([s.gpu for s in shards]) or []
    )
    for device, expected in (("cpu", [None, None]), ("auto", ["4", "6"])):
        raw = make_suite(base={"train": {"device": device}})
        request = SuiteRequest(write(tmp_path, raw), store=tmp_path / device, jobs=2)
        with pytest.raises(RunStopped, match="left 2 of 2 cells unfinished"):
            run_suite(request)  # the stand-in run_shards trained nothing
        assert seen.pop() == expected


def test_a_suite_that_declares_jobs_trains_in_that_many_processes(
    tmp_path, make_suite, monkeypatch
) -> None:
    from flashprobe.runner import suite_run

    seen: list[int] = []
    monkeypatch.setattr(suite_run, "run_shards", lambda shards, say: seen.append(len(shards)) or [])
    request = SuiteRequest(write(tmp_path, {**make_suite(), "jobs": 2}), store=tmp_path / "s")
    with pytest.raises(RunStopped, match="left 2 of 2 cells unfinished"):
        run_suite(request)  # the stand-in run_shards trained nothing
    assert seen == [2]
