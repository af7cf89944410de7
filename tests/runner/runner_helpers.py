"""Helpers shared by the runner tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path

from flashprobe.runner.branches import check_branches
from flashprobe.runner.plan import plan_suite
from flashprobe.runner.training import SuiteEvents, run_plan
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.cell_config import normalise_cell_config
from flashprobe.suites.suite import expand_suite
from flashprobe.train.metrics import read_jsonl


class Recorder(SuiteEvents):
    """Records (cell, step) of every trained step; raises `fault` at (cell, step) `at`."""

    def __init__(self, at: tuple[str, int] | None = None, fault: type = KeyboardInterrupt):
        self.steps: list[tuple[str, int]] = []
        self.at, self.fault, self.current = at, fault, ""

    def cell_started(self, planned) -> None:
        self.current = planned.cell.name

    def step(self, record) -> None:
        self.steps.append((self.current, record["step"]))
        if (self.current, record["step"]) == self.at:
            raise self.fault("injected")


def suite_of(raw):
    suite = expand_suite(raw, validate=normalise_cell_config)
    check_branches(suite)
    return suite


def run(raw, root: Path, events=None, **flags):
    store = ResultStore(root)
    plan = plan_suite(suite_of(raw), store, version="test", **flags)
    return run_plan(plan, store, version="test", events=events)


def losses(outcome) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(outcome.planned.run_dir / "metrics.jsonl")}


def all_json_parses(root: Path) -> None:
    for path in root.rglob("*.json"):
        json.loads(path.read_text())
    for path in root.rglob("*.jsonl"):
        read_jsonl(path)
    assert not [p for p in root.rglob("*.tmp")]
