"""A longer horizon continues the finished shorter run of a cell: the numbers from scratch."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import run, suite_of

from flashprobe.runner.extension import copy_run, horizon_free
from flashprobe.runner.plan import plan_suite
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.suite import deep_merge
from flashprobe.train.metrics import read_jsonl

CONSTANT = {"kind": "constant", "warmup_steps": 2}


def horizon(make_suite, steps: int, **changes: Any) -> dict[str, Any]:
    """The tiny suite at `steps`, constant lr, stats every 2 steps, a capture at step 2."""
    base = {
        "schedule": CONSTANT,
        "train": {"steps": steps, "checkpoint_every": 0},
        "metrics": {"attention_stats_every": 2},
        "capture": {"layers": [1], "steps": [2]},
    }
    return deep_merge(make_suite(base=base), copy.deepcopy(changes))


def actions(raw, root: Path) -> dict[str, str]:
    plan = plan_suite(suite_of(raw), ResultStore(root), version="test")
    return {p.cell.variant: p.action for p in plan}


def records(outcome) -> list[dict[str, Any]]:
    """Per step: the loss, gradient norm, lr and the attention stats (what training decides)."""
    keys = ("step", "loss", "grad_norm", "lr", "attention")
    return [
        {k: r.get(k) for k in keys} for r in read_jsonl(outcome.planned.run_dir / "metrics.jsonl")
    ]


def test_an_extended_run_equals_the_run_from_scratch(tmp_path: Path, make_suite) -> None:
    short = run(horizon(make_suite, 6), tmp_path / "a")
    assert actions(horizon(make_suite, 10), tmp_path / "a") == dict.fromkeys(
        ("fa2", "sfa"), "extend"
    )
    extended = run(horizon(make_suite, 10), tmp_path / "a")
    scratch = run(horizon(make_suite, 10), tmp_path / "b")
    for mine, theirs, before in zip(extended, scratch, short, strict=True):
        assert mine.status == "done" and mine.summary["extended_from"] == before.planned.key
        assert mine.summary["steps_trained"] == 4 and mine.summary["resumed_from_step"] == 6
        assert records(mine) == records(theirs)  # bit for bit, every step
        assert mine.summary["final_loss"] == theirs.summary["final_loss"]
        assert (mine.planned.run_dir / "captures" / "step_0000002.safetensors").is_file()
        cell = json.loads((mine.planned.path / "cell.json").read_text())
        assert cell["extended_from"] == before.planned.key
        # the shorter run is left as it was
        assert len(read_jsonl(before.planned.run_dir / "metrics.jsonl")) == 6
    again = run(horizon(make_suite, 10), tmp_path / "a")
    assert {o.status for o in again} == {"cached"}


@pytest.mark.parametrize(
    "changes",
    [
        {"base": {"schedule": {"kind": "cosine", "decay_steps": None}}},  # lr depends on steps
        # sfa's source, fa2, ran at another lr in the shorter run: another branch checkpoint
        {
            "branch": {"from": "fa2", "step": 4},
            "base": {"train": {"checkpoint_every": 2}},
            "variants": {"fa2": {"optimizer": {"lr": 1e-3}}},
        },
    ],
)
def test_runs_that_a_longer_horizon_would_change_start_over(
    tmp_path: Path, make_suite, changes: dict[str, Any]
) -> None:
    first = copy.deepcopy(changes)
    if "branch" in changes:
        first["variants"]["fa2"]["optimizer"]["lr"] = 2e-3
    run(horizon(make_suite, 6, **first), tmp_path)
    assert set(actions(horizon(make_suite, 10, **changes), tmp_path).values()) == {"run"}


def test_only_the_same_config_and_code_at_a_shorter_horizon_is_extended(
    tmp_path: Path, make_suite
) -> None:
    run(horizon(make_suite, 6), tmp_path)
    with_decay = {"base": {"schedule": {"kind": "cosine", "decay_steps": 20}}}
    assert set(actions(horizon(make_suite, 10, **with_decay), tmp_path).values()) == {"run"}
    other_lr = {"base": {"optimizer": {"lr": 1e-3}}}
    assert set(actions(horizon(make_suite, 10, **other_lr), tmp_path).values()) == {"run"}
    assert set(actions(horizon(make_suite, 4), tmp_path).values()) == {"run"}  # never backwards
    other_code = plan_suite(
        suite_of(horizon(make_suite, 10)), ResultStore(tmp_path), version="other"
    )
    assert {p.action for p in other_code} == {"run"}
    assert set(actions(horizon(make_suite, 10), tmp_path).values()) == {"extend"}


def test_a_branched_run_extends_beside_its_source_as_from_scratch(
    tmp_path: Path, make_suite
) -> None:
    branched = {"branch": {"from": "fa2", "step": 4}, "base": {"train": {"checkpoint_every": 2}}}
    run(horizon(make_suite, 6, **branched), tmp_path / "a")
    assert actions(horizon(make_suite, 10, **branched), tmp_path / "a") == {
        "fa2": "extend",
        "sfa": "extend",
    }
    extended = run(horizon(make_suite, 10, **branched), tmp_path / "a")
    scratch = run(horizon(make_suite, 10, **branched), tmp_path / "b")
    for mine, theirs in zip(extended, scratch, strict=True):
        assert mine.status == "done" and mine.summary["extended_from"]
        assert records(mine) == records(theirs)
    sfa = json.loads((extended[1].planned.path / "cell.json").read_text())
    assert sfa["source_key"] == extended[0].planned.key  # the extended source, not the old one


def test_a_branch_of_a_source_whose_lr_depends_on_the_horizon_starts_over(
    tmp_path: Path, make_suite
) -> None:
    cosine = {"schedule": {"kind": "cosine", "decay_steps": None}}
    changes = {
        "branch": {"from": "fa2", "step": 4},
        "base": {"train": {"checkpoint_every": 2}},
        "variants": {"fa2": cosine},  # sfa keeps the constant lr
    }
    run(horizon(make_suite, 6, **changes), tmp_path)
    assert actions(horizon(make_suite, 10, **changes), tmp_path) == {"fa2": "run", "sfa": "run"}


def test_a_run_stopped_by_its_divergence_rule_is_not_extended(tmp_path: Path, make_suite) -> None:
    """A run the divergence rule stopped ends the same way at any horizon: nothing to extend."""
    (fa2, _) = run(horizon(make_suite, 6), tmp_path)
    summary = fa2.planned.path / "summary.json"
    stopped = {**json.loads(summary.read_text()), "steps_done": 3, "diverged": True}
    summary.write_text(json.dumps(stopped))
    assert actions(horizon(make_suite, 10), tmp_path) == {"fa2": "run", "sfa": "extend"}


def test_horizon_free_schedules() -> None:
    assert horizon_free({"schedule": {"kind": "constant", "decay_steps": None}})
    assert horizon_free({"schedule": {"kind": "cosine", "decay_steps": 100}})
    assert not horizon_free({"schedule": {"kind": "cosine", "decay_steps": None}})


def test_copy_run_links_what_is_written_once_and_copies_what_grows(tmp_path: Path) -> None:
    source = tmp_path / "a"
    (source / "checkpoints" / "step_0000004").mkdir(parents=True)
    (source / "checkpoints" / "step_0000004" / "model.safetensors").write_bytes(b"w")
    (source / "metrics.jsonl").write_text('{"step": 0}\n')
    copy_run(source, tmp_path / "b")
    linked = tmp_path / "b" / "checkpoints" / "step_0000004" / "model.safetensors"
    assert linked.read_bytes() == b"w"
    assert (
        linked.stat().st_ino
        == (source / "checkpoints/step_0000004/model.safetensors").stat().st_ino
    )
    with (tmp_path / "b" / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 1}\n')
    assert (source / "metrics.jsonl").read_text() == '{"step": 0}\n'
