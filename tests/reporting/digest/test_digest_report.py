"""digest.report: several digests → one report per suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashprobe.attribution.ranking import fisher_exact
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.report import build_digest_reports, load_digests
from flashprobe.reporting.digest.rise import RiseRule
from flashprobe.reporting.digest.tables import render_digest_reports
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
    assert "## Control check: twice the reference's median divergence step" in text
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


def test_a_run_named_in_one_suite_of_several(tmp_path: Path, make) -> None:
    path = make.digest(tmp_path / "d.json", [
        make.cell("a", 0, suite="one"),
        make.cell("b", 1, suite="two"),
    ])  # fmt: skip
    one, two = build_digest_reports(load_digests([path]), chosen=["b:1"])
    assert [(c.variant, c.seed) for c in one.chosen] == []
    assert [(c.variant, c.seed) for c in two.chosen] == [("b", 1)]
    with pytest.raises(FlashprobeError, match="no run 'b:0'"):
        build_digest_reports(load_digests([path]), chosen=["b:0"])


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
    assert "different token streams" not in text  # one corpus


OLD, NEW = "0123456789abcdef", "fedcba9876543210"  # two corpora's data digests


def test_runs_trained_on_different_token_streams_are_noted(tmp_path: Path, make) -> None:
    path = make.digest(tmp_path / "d.json", [
        make.cell("fa2", 0, data_digest=OLD), make.cell("fa2", 1, data_digest=NEW),
        make.cell("sfa", 0, data_digest=OLD), make.cell("sfa", 1),  # recorded none: unknown
        make.cell("sfa", 2, data_digest=NEW, finished=False),  # cut: no summary, unknown
    ])  # fmt: skip
    (report,) = build_digest_reports(load_digests([path]))
    (note,) = [n for n in report.notes if "token streams" in n]
    assert note.endswith("0123456789ab: fa2 seed 0, sfa seed 0; fedcba987654: fa2 seed 1")
    assert f"- {note}" in render_digest_reports([report], "markdown")
    same = make.digest(tmp_path / "same.json", [
        make.cell("fa2", 0, data_digest=OLD), make.cell("fa2", 1),  # an older run: unknown
    ])  # fmt: skip
    (report,) = build_digest_reports(load_digests([same]))
    assert not [n for n in report.notes if "token streams" in n]


def test_a_v1_digest_s_summaries_are_compared_too(tmp_path: Path, make) -> None:
    cells = [make.cell("fa2", s, data_digest=d) for s, d in ((0, OLD), (1, NEW))]
    v1 = [{k: c[k] for k in ("meta", "summary", "loss", "val_loss")} for c in cells]
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(v1))
    (report,) = build_digest_reports(load_digests([path]))
    assert any(n.endswith("0123456789ab: fa2 seed 0; fedcba987654: fa2 seed 1")
               for n in report.notes)  # fmt: skip


# -- the reference of another suite, branched suites -----------------------------------------
def _config(kernel: str, steps: int = 4000, lr: float = 2e-3) -> dict:
    return {"optimizer": {"lr": lr}, "train": {"steps": steps}, "kernel": {"preset": kernel},
            "divergence": {"min_step": 500}}  # fmt: skip


def _with_config(cell: dict, config: dict | None, **meta: object) -> dict:
    cell["config"] = config
    cell["meta"].update(meta)
    return cell


def test_a_suite_without_the_reference_borrows_it(tmp_path: Path, make) -> None:
    quick = [
        make.cell("paper-code", s, suite="quick", planned=None, diverged=d)
        for s, d in enumerate([1421, 3225, 1659])
    ]  # fmt: skip  (v1-like: no config)
    controls = [
        _with_config(make.cell("fa2", 0, suite="controls", planned=4000), _config("fa2")),
        _with_config(make.cell("fa2", 1, suite="controls", planned=4000, diverged=3000),
                     _config("fa2")),
        _with_config(make.cell("fp32", 0, suite="controls", planned=4000, reached=2000,
                               finished=False), _config("fp32")),
    ]  # fmt: skip
    paths = [make.digest(tmp_path / "quick.json", quick),
             make.digest(tmp_path / "controls.json", controls)]  # fmt: skip
    reports = build_digest_reports(load_digests(paths), reference="paper-code")
    report = next(r for r in reports if r.suite == "controls")
    assert report.reference == "paper-code" and report.reference_suite == "quick"
    notes = " ".join(report.notes)
    assert "paper-code has no runs in this suite: the reference is its runs of suite quick" in notes
    assert "not checked: a v1 digest has no config" in notes
    rows = {(o.suite, o.variant): o for o in report.outcomes}
    assert rows["controls", "fa2"].fisher_p == pytest.approx(fisher_exact(1, 2, 3, 3))
    assert [c.row.variant for c in report.controls] == ["fa2", "fp32"]
    fa2, fp32 = report.controls
    assert fa2.bound == 3318 and not fa2.passed and fp32.why.startswith("stopped short of 3318")
    text = render_digest_reports([report], "markdown")
    assert "Reference: paper-code (suite quick)." in text
    assert "| paper-code (suite quick) | 0,1,2 " in text
    assert "## Control check: twice the reference's median divergence step" in text
    assert "paper-code of suite quick: median divergence step 1659 (diverged seeds 0: 1421" in text
    assert "diverged within 3318: seed 1 at 3000" in text


def test_a_reference_of_another_regime_is_not_borrowed(tmp_path: Path, make) -> None:
    cells = [
        _with_config(make.cell("paper-code", 0, suite="muon", diverged=900),
                     _config("paper-code", lr=1.4e-2)),
        _with_config(make.cell("paper-code", 0, suite="quick", diverged=1400),
                     _config("paper-code", steps=3000)),  # planned steps may differ
        _with_config(make.cell("fa2", 0, suite="controls"), _config("fa2")),
    ]  # fmt: skip
    digests = load_digests([make.digest(tmp_path / "d.json", cells)])
    report = build_digest_reports(digests, suite="controls", reference="paper-code")[0]
    notes = " ".join(report.notes)
    assert report.reference_suite == "quick"
    assert "paper-code of suite muon not borrowed: its config differs: optimizer.lr=0.014" in notes
    assert "the configs agree but for the kernel, the capture and the planned steps" in notes
    del cells[1]
    digests = load_digests([make.digest(tmp_path / "e.json", cells)])
    report = build_digest_reports(digests, suite="controls", reference="paper-code")[0]
    assert report.reference is None and not report.controls
    assert "no reference variant 'paper-code' in this suite" in " ".join(report.notes)


def test_a_branched_suite_notes_its_branch_point(tmp_path: Path, make) -> None:
    quick = [_with_config(make.cell("paper-code", s, suite="quick", diverged=d),
                          _config("paper-code")) for s, d in enumerate([1421, 1659])]  # fmt: skip
    branched = {"branch_from": "paper-code", "branch_step": 500}
    attribution = [
        *(_with_config(make.cell("paper-code", s, suite="attr", planned=500),
                       _config("paper-code", steps=500)) for s in (0, 1)),
        _with_config(make.cell("acc-fp32", 0, suite="attr", diverged=2100),
                     _config("acc-fp32"), **branched),
        _with_config(make.cell("acc-fp32", 1, suite="attr", reached=3000, finished=False),
                     _config("acc-fp32"), **branched),
    ]  # fmt: skip
    suites = {"attr": {"branch": {"from": "paper-code", "step": 500},
                       "replay": {"baseline": "paper-code"}}}  # fmt: skip
    paths = [make.digest(tmp_path / "q.json", quick),
             make.digest(tmp_path / "a.json", attribution, suites)]  # fmt: skip
    (report,) = build_digest_reports(load_digests(paths), suite="attr")
    assert report.branch == ("paper-code", 500) and report.reference == "paper-code"
    assert report.reference_suite == "quick"  # its own paper-code only reached the branch step
    notes = " ".join(report.notes)
    assert (
        "branch point: every variant but paper-code starts from paper-code's checkpoint at step "
        "500 of its seed (steps 0–499 are paper-code's, in the same data order)"
    ) in notes
    assert "paper-code trained only to step 500 here (seeds 0,1): no outcome" in notes
    assert "paper-code has no run with an outcome in this suite" in notes
    rows = {(o.suite, o.variant): o for o in report.outcomes}
    own = rows["attr", "paper-code"]
    assert own.n == 0 and own.fisher_p is None
    assert [s.label for s in own.seeds] == [
        "no outcome (branch source, trained to the branch step 500 only)"
    ] * 2
    assert rows["attr", "acc-fp32"].n == 1 and rows["attr", "acc-fp32"].fisher_p == 1.0
    (check,) = report.controls
    assert check.bound == 3080 and check.why == (
        "diverged within 3080: seed 0 at 2100; stopped short of 3080 without diverging: "
        "seed 1 at ≥3000"
    )
    data = json.loads(render_digest_reports([report], "json"))[0]
    assert data["branch"] == {"from": "paper-code", "step": 500}
    assert data["reference_suite"] == "quick" and data["control_check"][0]["passed"] is False


def test_the_rise_table_leaves_out_branch_sources(tmp_path: Path, make) -> None:
    spectral = [{"step": 500, "wq": [1.0], "wk": [1.0]}, {"step": 900, "wq": [3.0], "wk": [1.0]}]
    attr = [make.cell("paper-code", 0, suite="attr", planned=500,
                      spectral=[{"step": 400, "wq": [1.0], "wk": [1.0]}]),
            make.cell("score-fp32", 0, suite="attr", planned=3400, spectral=spectral)]  # fmt: skip
    attr[1]["meta"].update(branch_from="paper-code", branch_step=500)
    suites = {"attr": {"branch": {"from": "paper-code", "step": 500}}}
    (report,) = build_digest_reports(
        load_digests([make.digest(tmp_path / "a.json", attr, suites)]),
        rule=RiseRule(reference_step=500),
    )
    assert {r.cell.variant for r in report.rises} == {"score-fp32"}
