"""digest.report: several digests → one report per suite, as markdown, text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.report import (
    build_digest_reports,
    load_digests,
    render_digest_reports,
)
from flashprobe.reporting.digest.rise import RiseRule
from flashprobe.reporting.digest.writer import write_digest

SPECTRAL = [{"step": s, "wq": [1.0, 1.0 + s / 100], "wk": [1.0, 1.0]} for s in range(0, 500, 100)]


def _two_sessions(tmp_path: Path, make) -> list[Path]:
    first = [
        make.cell("paper-code", 0, diverged=300, spectral=SPECTRAL[:4], started=1.0),
        make.cell("fa2", 0, reached=200, finished=False, started=1.0),
    ]
    second = [
        make.cell("fa2", 0, reached=350, finished=False, started=2.0),  # a rerun, later
        make.cell("paper-code", 1, diverged=200, started=2.0),
        make.cell("fa2", 1, started=2.0),
    ]
    suites = {"s": {"replay": {"baseline": "paper-code"}}}
    return [
        make.digest(tmp_path / "a.json", first),
        make.digest(tmp_path / "b.json", second, suites),
    ]


def test_pooled_outcomes_and_notes(tmp_path: Path, make) -> None:
    (report,) = build_digest_reports(load_digests(_two_sessions(tmp_path, make)))
    assert report.reference == "paper-code"  # declared by the suite
    assert [(o.variant, o.n, len(o.diverged)) for o in report.outcomes] == [
        ("paper-code", 2, 2),
        ("fa2", 1, 0),
    ]
    assert [s.cell.describe_source() for s in report.superseded] == ["a.json#1"]
    text = render_digest_reports([report], "markdown")
    assert "| paper-code | 0,1     | 2   | 2/2        | 250                      | " in text
    assert "| 0: diverged at 300; 1: diverged at 200 " in text
    # fa2: the rerun counts (cut at ≥350, not the earlier 200); seed 1 finished its 100 steps
    assert "| 0: no outcome (cut at ≥350); 1: 100, not diverged |" in text
    assert "runs of different planned lengths" not in text  # every run planned 100 steps
    assert "1 superseded run(s) not counted" in text
    assert "## Control check: twice paper-code's median divergence step" in text
    assert "paper-code: median divergence step 250 (diverged seeds 0: 300, 1: 200)" in text
    assert (
        "| fa2       | 0,1     | 500             | does not pass | stopped short of 500 without "
        "diverging: seed 0 at ≥350, seed 1 at 100 |"
    ) in text
    assert "Spectral norms per layer: paper-code seed 1" not in text
    assert "## Spectral norms per layer: paper-code seed 0" in text  # its first diverged seed


def test_horizon_reference_and_chosen_runs(tmp_path: Path, make) -> None:
    digests = load_digests(_two_sessions(tmp_path, make))
    (report,) = build_digest_reports(
        digests, horizon=250, reference="fa2", chosen=["paper-code:1", "fa2:0"],
        rule=RiseRule(reference_step=0),
    )  # fmt: skip
    assert report.reference == "fa2"
    rows = {o.variant: o for o in report.outcomes}
    assert [s.status for s in rows["paper-code"].seeds] == ["not diverged", "diverged"]
    assert [s.status for s in rows["fa2"].seeds] == ["not diverged", "no outcome"]
    assert [c.label for c in report.chosen] == ["paper-code seed 1", "fa2 seed 0"]
    data = json.loads(render_digest_reports([report], "json"))[0]
    assert data["horizon"] == 250 and data["reference"] == "fa2"
    (traj,) = [t for t in data["trajectories"] if (t["variant"], t["seed"]) == ("paper-code", 0)]
    assert traj["W_Q"]["steps"] == [0, 100, 200] and traj["W_Q"]["values"][2] == [1.0, 3.0]
    (rise,) = [r for r in data["spectral_rise"] if r["matrix"] == "W_Q"]
    assert rise["first_layers"] == [1] and rise["first_step"] == 100  # 2.0 ≥ 2 × 1.0
    assert rise["diverged_step"] is None and rise["lead"] is None  # it diverged after 250
    text = render_digest_reports([report], "text")
    assert text.startswith("Suite s\n") and "Outcomes\n--------" in text


def test_suites_points_and_bad_choices(tmp_path: Path, make) -> None:
    path = make.digest(tmp_path / "d.json", [
        make.cell("a", 0, suite="one", point=[("lr", 0.1)]),
        make.cell("a", 0, suite="one", point=[("lr", "1e-3")]),  # points of mixed types sort
        make.cell("a", 0, suite="two"),
    ])  # fmt: skip
    digests = load_digests([path])
    reports = build_digest_reports(digests)
    assert [r.suite for r in reports] == ["one", "two"]
    assert "| a         | lr=0.1  |" in render_digest_reports(reports[:1], "markdown")
    assert "no reference variant" in " ".join(reports[0].notes)
    with pytest.raises(FlashprobeError, match=r"no suite 'three'.*suites: one, two"):
        build_digest_reports(digests, suite="three")
    with pytest.raises(FlashprobeError, match="no variant 'b'"):
        build_digest_reports(digests, reference="b")
    with pytest.raises(FlashprobeError, match="VARIANT:SEED"):
        build_digest_reports(digests, chosen=["a"])
    with pytest.raises(FlashprobeError, match="no run 'a:7'"):
        build_digest_reports(digests, chosen=["a:7"])
    with pytest.raises(FlashprobeError, match="--horizon"):
        build_digest_reports(digests, horizon=0)
    with pytest.raises(FlashprobeError, match="--format"):
        render_digest_reports(reports, "csv")
    with pytest.raises(FlashprobeError, match="no digest files"):
        load_digests([])
    empty = make.digest(tmp_path / "e.json", [])
    with pytest.raises(FlashprobeError, match="no cells"):
        build_digest_reports(load_digests([empty]))


def test_report_of_a_tiny_store(tiny_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny.json"
    write_digest(tiny_store, out)
    (report,) = build_digest_reports(load_digests([out]), reference="fa2")
    rows = {o.variant: o for o in report.outcomes}
    assert [s.status for s in rows["fa2"].seeds] == ["not diverged", "no outcome"]
    assert [s.status for s in rows["touchy"].seeds] == ["diverged"]
    assert rows["touchy"].fisher_p == 1.0  # 1/1 vs 0/1
    assert {r.trajectory.matrix for r in report.rises} == {"W_Q", "W_K"}
    assert len(report.attention) == 3
    data = json.loads(render_digest_reports([report], "json"))[0]
    series = data["trajectories"][0]["attention"]
    assert set(series) == {"max_logit", "tie_events", "p_bar_ones"}
    assert [p[0] for p in series["tie_events"]["0"]] == [9, 19, 29]
    text = render_digest_reports([report], "markdown")
    assert "## Outcomes" in text and "## Attention" in text
