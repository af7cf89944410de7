"""Plan and outcome rows: what each cell will do and train, and how it ended."""

from __future__ import annotations

import json

import pytest
from runner_helpers import Recorder, suite_of

from flashprobe.runner.plan import plan_suite
from flashprobe.runner.summary import outcome_row, plan_row
from flashprobe.runner.training import run_plan
from flashprobe.store.result_store import ResultStore

TOKENS_PER_STEP = 4 * 32  # the tiny suite's batch × block


def test_rows_of_a_plan_and_of_its_outcomes(tmp_path, make_suite) -> None:
    raw = make_suite(axes={"optimizer.lr": [1e-3]}, branch={"from": "fa2", "step": 4})
    suite, store = suite_of(raw), ResultStore(tmp_path)
    plan = plan_suite(suite, store, version="test")
    source, branched = (plan_row(p) for p in plan)
    assert source == {
        "variant": "fa2",
        "point": "optimizer.lr=0.001",
        "seed": 0,
        "action": "run",
        "branch": None,
        "steps": 8,
        "cell": plan[0].path.name,
        "tokens": 8 * TOKENS_PER_STEP,
    }
    assert branched["branch"] == "fa2@4" and branched["tokens"] == 4 * TOKENS_PER_STEP
    stop = Recorder(at=(plan[1].cell.name, 6))
    with pytest.raises(KeyboardInterrupt):
        run_plan(plan, store, version="test", events=stop)
    done, interrupted = plan_suite(suite, store, version="test", resume=True)
    assert (plan_row(done)["action"], plan_row(done)["tokens"]) == ("skip", 0)
    # no checkpoint of its own yet (its first is at step 8): it starts again at the branch step
    assert plan_row(interrupted)["action"] == "resume"
    assert plan_row(interrupted)["tokens"] == 4 * TOKENS_PER_STEP
    finished = run_plan([done, interrupted], store, version="test")
    row = outcome_row(finished[1])
    assert row["status"] == "done" and row["step"] == 8 and row["diverged"] is False
    assert row["final_loss"] == finished[1].summary["final_loss"]
    assert isinstance(row["tokens_per_s"], int)
    assert outcome_row(finished[0])["status"] == "cached"


def test_an_extended_cell_says_which_run_it_continues(tmp_path, make_suite) -> None:
    raw = make_suite(base={"schedule": {"kind": "constant", "warmup_steps": 2}})
    raw["variants"] = {"fa2": {}}
    store = ResultStore(tmp_path)
    (short,) = run_plan(plan_suite(suite_of(raw), store, version="test"), store,
                        version="test")  # fmt: skip
    raw["base"]["train"]["steps"] = 12  # the same cell to a longer horizon
    longer = suite_of(raw)
    (extended,) = plan_suite(longer, store, version="test")
    row = plan_row(extended)
    assert row["action"] == f"extend {short.planned.path.name} from step 8"
    assert row["tokens"] == 4 * TOKENS_PER_STEP and row["steps"] == 12


def test_an_outcome_row_names_a_gradient_runaway_the_loss_rule_let_pass(
    tmp_path, make_suite
) -> None:
    raw = make_suite()
    raw["variants"] = {"fa2": {}}
    store = ResultStore(tmp_path)
    (finished,) = run_plan(plan_suite(suite_of(raw), store, version="test"), store,
                           version="test")  # fmt: skip
    assert outcome_row(finished)["grad_runaway"] is None  # a tiny run: its norms stay put
    metrics = finished.planned.path / "run" / "metrics.jsonl"
    norms = [0.3] * 12 + [50.0]  # the 13th logged norm is 167× the median of those before it
    metrics.write_text("".join(json.dumps({"step": 10 * i, "loss": 1.0, "grad_norm": g}) + "\n"
                               for i, g in enumerate(norms)))  # fmt: skip
    row = outcome_row(finished)
    assert (row["diverged"], row["grad_runaway"]) == (False, 120)


def test_an_outcome_row_gives_the_held_loss_rise(tmp_path, make_suite) -> None:
    raw = make_suite()
    raw["variants"] = {"fa2": {}}
    raw["base"]["divergence"] = {"rise_margin": 5.0, "patience": 20, "min_step": 20}
    raw["base"]["metrics"] = {"log_every": 10}
    store = ResultStore(tmp_path)
    (finished,) = run_plan(plan_suite(suite_of(raw), store, version="test"), store,
                           version="test")  # fmt: skip
    metrics = finished.planned.path / "run" / "metrics.jsonl"
    losses = [3.0, 1.0, 1.3, 1.6, 1.5, 1.1]  # from step 20, 2 records in a row: 1.6, 1.5 hold 0.5
    metrics.write_text("".join(json.dumps({"step": 10 * i, "loss": x}) + "\n"
                               for i, x in enumerate(losses)))  # fmt: skip
    assert outcome_row(finished)["loss_rise"] == pytest.approx(0.5)
