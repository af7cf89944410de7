"""A tiny CPU result store (trained once per session) and synthetic digest cells.

The store: suite "tiny", a 2-layer GPT on the emulator, metrics logged every 10 steps (0-based
steps 9, 19, 29: what the digest's thinning must keep), spectral norms and attention statistics
every 10 steps. fa2 seed 0 trains 30 steps; `touchy` seed 0 has a hair-trigger loss rule and
diverges early; fa2 seed 1 is cut (KeyboardInterrupt, as a killed run) at step 14.

The replayed store: suite "replayed", the same model with captures of layers 0 and 1 at steps
5, 9 and 25; `touchy` (fa2 numerics) diverges at step 12 and trains on, `paper-code` does not
diverge; `flashprobe replay` then replays both variants on touchy's captures (emulator).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tiny_suite import tiny_suite

from flashprobe.attribution.replay import replay_suites
from flashprobe.runner.branches import check_branches
from flashprobe.runner.definition import write_suite_definition
from flashprobe.runner.plan import plan_suite
from flashprobe.runner.training import SuiteEvents, run_plan
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.cell_config import normalise_cell_config
from flashprobe.suites.suite import expand_suite

CUT_AT = 14  # fa2 seed 1 stops after this step
CAPTURED = [5, 9, 25]  # the replayed store's capture steps (touchy diverges at 12)

TINY: dict[str, Any] = tiny_suite(
    {
        "base": {
            "optimizer": {"lr": 3e-3},
            "train": {"steps": 30, "checkpoint_every": 10},
            "metrics": {
                "log_every": 10,
                "eval_every": 10,
                "eval_batches": 1,
                "spectral_every": 10,
                "attention_stats_every": 10,
            },
            "kernel": {"preset": "fa2", "block_n": 16},
        },
        "variants": {
            "fa2": {},
            "touchy": {"divergence": {"rise_margin": 1e-6, "min_step": 12, "patience": 1}},
        },
    }
)


class _CutAt(SuiteEvents):
    def __init__(self, step: int) -> None:
        self.at = step

    def step(self, record: Any) -> None:
        if record["step"] == self.at:
            raise KeyboardInterrupt("cut")


def _run(raw: dict[str, Any], root: Path, events: SuiteEvents | None = None) -> None:
    suite = expand_suite(raw, validate=normalise_cell_config)
    check_branches(suite)
    store = ResultStore(root)
    write_suite_definition(store, suite)  # as `flashprobe ablate` does
    run_plan(plan_suite(suite, store, version="test"), store, version="test", events=events)


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("digest") / "store"
    _run(copy.deepcopy(TINY), root)
    cut = copy.deepcopy(TINY)
    cut["seeds"] = [1]
    cut["variants"] = {"fa2": {}}
    with pytest.raises(KeyboardInterrupt):
        _run(cut, root, _CutAt(CUT_AT))
    return root


@pytest.fixture(scope="session")
def replayed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("replayed") / "store"
    raw = copy.deepcopy(TINY)
    raw["name"] = "replayed"
    raw["base"]["capture"] = {"layers": [0, 1], "steps": CAPTURED, "max_bytes": 10_000_000}
    raw["variants"] = {
        "touchy": {"divergence": {"rise_margin": 1e-6, "min_step": 12, "patience": 1,
                                  "stop": False}},
        "paper-code": {"kernel": {"preset": "paper-code", "block_n": 16}},
    }  # fmt: skip
    raw["replay"] = {"baseline": "touchy", "backend": "emulator"}
    _run(raw, root)
    assert [name for name, _ in replay_suites(root)] == ["replayed"]
    (touchy,) = (root / "replayed").glob("touchy--*")
    step = json.loads((touchy / "summary.json").read_text())["diverged_step"]
    assert CAPTURED[1] < step < CAPTURED[2], step  # captures on both sides of the divergence
    return root


# -- synthetic digests ----------------------------------------------------------------------
def make_cell(
    variant: str,
    seed: int,
    *,
    suite: str = "s",
    planned: int | None = 100,
    reached: int | None = None,
    diverged: int | None = None,
    finished: bool = True,
    key: str | None = None,
    started: float | None = 1.0,
    code: str = "c1",
    point: Sequence[Any] = (),
    spectral: Sequence[dict[str, Any]] = (),
    attention: Sequence[dict[str, Any]] = (),
    loss: Sequence[Sequence[Any]] = (),
    min_step: int = 0,
    data_digest: str | None = None,
) -> dict[str, Any]:
    """A v2 digest cell. reached: the steps trained (default: the divergence step + 1, else
    the planned steps); finished False leaves the summary out (a cut run); data_digest: the
    token stream its summary's environment records (None: none, as older summaries)."""
    if reached is None:
        reached = diverged + 1 if diverged is not None else planned
    summary = None
    if finished:
        summary = {"steps_done": reached, "diverged": diverged is not None,
                   "diverged_step": diverged}  # fmt: skip
        if data_digest is not None:
            summary["environment"] = {"data_digest": data_digest}
    return {
        "meta": {"suite": suite, "variant": variant, "seed": seed,
                 "point": [list(p) for p in point],
                 "key": key or f"{variant}{seed}{planned}{code}", "code_version": code},
        "config": None if planned is None else {"train": {"steps": planned},
                                                "divergence": {"min_step": min_step}},
        "started": started,
        "summary": summary,
        "last_step": reached - 1,
        "divergence": None if diverged is None else {"step": diverged, "rule": "rise"},
        "loss": [list(r) for r in loss],
        "val_loss": [],
        "attention": list(attention),
        "spectral": list(spectral),
    }  # fmt: skip


@pytest.fixture
def make() -> Any:
    """make.cell(...) and make.digest(path, cells, suites): synthetic v2 digests."""
    return SimpleNamespace(cell=make_cell, digest=write_digest_file, cut_at=CUT_AT)


def write_digest_file(
    path: Path, cells: Sequence[dict[str, Any]], suites: dict[str, Any] | None = None
) -> Path:
    digest = {"format": "flashprobe-digest", "version": 2, "every": 10, "store": "x",
              "suites": suites or {}, "cells": list(cells)}  # fmt: skip
    path.write_text(json.dumps(digest))
    return path
