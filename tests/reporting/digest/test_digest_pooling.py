"""digest.pooling: one run per (suite, variant, point, seed): the longest, then the latest."""

from __future__ import annotations

import json
from pathlib import Path

from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.pooling import one_run_per_seed


def _pool(tmp_path: Path, make, *digests):
    cells = []
    for order, digest in enumerate(digests):
        path = make.digest(tmp_path / f"d{order}.json", digest)
        cells += load_digest(path, order).cells
    return one_run_per_seed(cells)


def test_the_longest_run_wins_even_when_older(tmp_path: Path, make) -> None:
    long = make.cell("a", 0, planned=4000, started=1.0)
    short = make.cell("a", 0, planned=2000, started=9.0)
    kept, superseded = _pool(tmp_path, make, [long], [short])
    assert [(c.planned_steps, c.started) for c in kept] == [(4000, 1.0)]
    (s,) = superseded
    assert s.cell.planned_steps == 2000 and s.by is kept[0]
    assert "train.steps=2000" in s.differs
    assert "d1.json#0" in s.describe() and "counted" in s.describe()


def test_a_finished_run_wins_over_a_longer_one_cut_short(tmp_path: Path, make) -> None:
    # a 4,000-step run cut at 2,050 has no outcome; the 3,400-step rerun that finished has one
    cut = make.cell("a", 0, planned=4000, started=1.0, reached=2050, finished=False)
    done = make.cell("a", 0, planned=3400, started=9.0)
    kept, superseded = _pool(tmp_path, make, [cut], [done])
    assert [(c.planned_steps, c.finished) for c in kept] == [(3400, True)]
    assert superseded[0].cell.planned_steps == 4000


def test_a_cut_run_that_diverged_has_an_outcome(tmp_path: Path, make) -> None:
    cut = make.cell("a", 0, planned=4000, started=1.0, diverged=1500, finished=False)
    done = make.cell("a", 0, planned=3400, started=9.0)
    kept, _ = _pool(tmp_path, make, [cut], [done])
    assert [(c.planned_steps, c.diverged_step) for c in kept] == [(4000, 1500)]


def test_of_two_cut_runs_the_longest_plan_wins(tmp_path: Path, make) -> None:
    long = make.cell("a", 0, planned=4000, started=1.0, reached=1200, finished=False)
    short = make.cell("a", 0, planned=2000, started=9.0, reached=1500, finished=False)
    kept, _ = _pool(tmp_path, make, [long], [short])
    assert [c.planned_steps for c in kept] == [4000]


def test_equal_length_the_latest_wins(tmp_path: Path, make) -> None:
    old = make.cell("a", 0, started=1.0, code="old", diverged=40)
    new = make.cell("a", 0, started=2.0, code="new")
    kept, superseded = _pool(tmp_path, make, [new], [old])  # argument order does not matter
    assert [c.meta["code_version"] for c in kept] == ["new"]
    assert superseded[0].differs == "code old"


def test_the_same_run_digested_twice_keeps_the_further(tmp_path: Path, make) -> None:
    early = make.cell("a", 0, key="k", started=5.0, reached=30, finished=False)
    later = make.cell("a", 0, key="k", started=5.0, reached=90, finished=False)
    kept, superseded = _pool(tmp_path, make, [later], [early])
    assert [c.steps_reached for c in kept] == [90]
    assert superseded[0].differs == "the same run, digested at 30 steps"


def test_seeds_variants_suites_and_points_are_separate_runs(tmp_path: Path, make) -> None:
    cells = [
        make.cell("a", 0),
        make.cell("a", 1),
        make.cell("b", 0),
        make.cell("a", 0, suite="other"),
        make.cell("a", 0, point=[("lr", 0.1)]),
    ]
    kept, superseded = _pool(tmp_path, make, cells)
    assert len(kept) == 5 and not superseded


def test_v1_runs_by_steps_reached_then_argument_order(tmp_path: Path) -> None:
    def v1(name: str, last: int) -> Path:
        cell = {"meta": {"suite": "q", "variant": "a", "seed": 0, "key": name},
                "summary": None, "max_logit": [[last, {"0": 1.0}]]}  # fmt: skip
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([cell]))
        return path

    paths = [v1("first", 999), v1("second", 499), v1("third", 499)]
    cells = [c for i, p in enumerate(paths) for c in load_digest(p, i).cells]
    kept, superseded = one_run_per_seed(cells)
    assert [c.key for c in kept] == ["first"]  # reached 1000 steps > 500
    kept, _ = one_run_per_seed(cells[1:])
    assert [c.key for c in kept] == ["third"]  # equal: the later argument
    assert {s.cell.key for s in superseded} == {"second", "third"}
