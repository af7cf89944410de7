"""digest.ranking: the restore / add ranking of a branched suite from digests (attribution.ranking
on digest outcomes), its borrowed baseline, its mechanism share, its readings and rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flashprobe.attribution.ranking import fisher_exact
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.report import build_digest_reports, load_digests
from flashprobe.reporting.digest.tables import RANKING_COLS, render_digest_reports
from flashprobe.spec import make_spec
from flashprobe.suites.cell_config import resolve_cell_config
from flashprobe.suites.declared import declared_config
from flashprobe.suites.suite import expand_suite

SEEDS = (0, 1, 2)
BRANCHED = {"branch_from": "paper-code", "branch_step": 500}
SUITES = {"attr": {"branch": {"from": "paper-code", "step": 500},
                   "replay": {"baseline": "paper-code", "safe": "fa2"}}}  # fmt: skip
#: variant → its kernel, and the divergence step of seeds 0, 1, 2 (None: finished clean)
ATTR: dict[str, tuple[dict[str, Any], tuple[int | None, ...]]] = {
    "fa2": ({"preset": "fa2"}, (None, None, None)),
    "fp32": ({"preset": "fp32"}, (None, None, None)),
    "acc-fp32": ({"preset": "paper-code", "accumulator": "fp32"}, (None, None, None)),
    "score-fp32": ({"preset": "paper-code", "score_precision": "fp32"}, (1500, 1700, 1600)),
    "pbar-fp32": ({"preset": "paper-code", "p_bar_precision": "fp32"}, (None, 2900, None)),
    "fa2-acc-bf16": ({"preset": "fa2", "accumulator": "bf16"}, (2000, 2400, 2200)),
    "fa2-score-bf16": ({"preset": "fa2", "score_precision": "bf16"}, (None, None, None)),
}  # fmt: skip
QUICK_DIVERGED = (1421, 3225, 1659, 1512)  # seeds 0-3: seed 3 is not one of attr's


def _config(kernel: dict[str, Any], steps: int, capture: bool = False) -> dict[str, Any]:
    """A resolved cell config as the digest holds it (the kernel as model.attention.spec)."""
    spec = make_spec(kernel).to_dict()
    return {
        "model": {"n_layer": 12, "attention": {"impl": "flashprobe", "spec": spec}},
        "optimizer": {"name": "adamw", "lr": 2e-3},
        "train": {"steps": steps, "batch_size": 32},
        "divergence": {"min_step": 500},
        "capture": {"layers": [0, 1], "steps": [900]} if capture else None,
    }


def _cell(make, variant: str, seed: int, suite: str, kernel: dict, steps: int, diverged,
          **kw: Any) -> dict[str, Any]:  # fmt: skip
    cell = make.cell(variant, seed, suite=suite, planned=steps, diverged=diverged, **kw)
    cell["config"] = _config(kernel, steps, capture=suite == "quick")
    if suite == "attr" and variant != "paper-code":
        cell["meta"].update(BRANCHED)
    return cell


REPLAY = {  # variant → δ bias of the replay of quick's paper-code seed 0
    "paper-code": 1.0, "acc-fp32": 0.2, "fa2": 0.1, "fa2-acc-bf16": 0.55, "score-fp32": 1.3,
}  # fmt: skip


def _replay() -> dict[str, Any]:
    return {"source_cell": "paper-code--q0", "backend": "triton", "steps": [900],
            "layers": [0, 1], "notes": [], "delta": {},
            "summary": {v: {"delta_bias": b, "replayed_rows": 4096,
                            "delta_t_max": 9.0 if v == "paper-code" else 1.0}
                        for v, b in REPLAY.items()}}  # fmt: skip


def _digests(tmp_path: Path, make, *, replay: bool = True) -> list[Path]:
    pc = {"preset": "paper-code"}
    quick = [_cell(make, "paper-code", s, "quick", pc, 4000, d)
             for s, d in enumerate(QUICK_DIVERGED)]  # fmt: skip
    if replay:
        quick[0]["replay"] = _replay()
    attr = [_cell(make, "paper-code", s, "attr", pc, 500, None) for s in SEEDS]
    for variant, (kernel, steps) in ATTR.items():
        attr += [_cell(make, variant, s, "attr", kernel, 3400, steps[s]) for s in SEEDS]
    paths = [make.digest(tmp_path / "quick.json", quick),
             make.digest(tmp_path / "attr.json", attr, SUITES)]  # fmt: skip
    for path in paths:  # format v3: the replay field
        data = json.loads(path.read_text())
        data["version"] = 3
        path.write_text(json.dumps(data))
    return paths


def _report(tmp_path: Path, make, **kw: Any):
    (report,) = build_digest_reports(
        load_digests(_digests(tmp_path, make, replay=kw.pop("replay", True))), suite="attr", **kw
    )
    return report


def test_designs_components_counts_and_fisher(tmp_path: Path, make) -> None:
    ranking = _report(tmp_path, make).ranking
    assert ranking is not None
    assert (ranking.baseline, ranking.baseline_suite, ranking.safe) == (
        "paper-code",
        "quick",
        "fa2",
    )
    rows = {r["variant"]: r for r in ranking.rows}
    assert {v: rows[v]["design"] for v in rows} == {
        "paper-code": "baseline", "fa2": "safe", "acc-fp32": "restore", "score-fp32": "restore",
        "pbar-fp32": "restore", "fa2-acc-bf16": "add", "fa2-score-bf16": "add", "fp32": "neither",
    }  # fmt: skip
    assert rows["acc-fp32"]["component"] == "accumulator=fp32"
    assert rows["fa2-acc-bf16"]["component"] == "accumulator=bf16"
    assert rows["fa2-acc-bf16"]["reference"] == "fa2"
    assert rows["acc-fp32"]["reference"] == "paper-code"
    # the borrowed baseline: quick's paper-code on attr's seeds only (its seed 3 left out)
    base = rows["paper-code"]
    assert (base["suite"], base["seed_list"], base["failed"], base["seeds"]) == (
        "quick", [0, 1, 2], 3, 3,
    )  # fmt: skip
    assert base["steps_median"] == 1659
    assert rows["pbar-fp32"]["failed_seeds"] == [1] and rows["pbar-fp32"]["seeds"] == 3
    for variant, (k, ref_k) in {
        "acc-fp32": (0, 3),
        "score-fp32": (3, 3),
        "pbar-fp32": (1, 3),
        "fa2-acc-bf16": (3, 0),
        "fa2-score-bf16": (0, 0),
    }.items():
        assert rows[variant]["failed"] == k
        assert rows[variant]["fisher_p"] == pytest.approx(fisher_exact(k, 3, ref_k, 3))
    assert rows["acc-fp32"]["delta_p"] == 1.0 and rows["fa2-acc-bf16"]["delta_p"] == 1.0
    assert rows["score-fp32"]["delta_p"] == 0.0
    assert rows["score-fp32"]["steps_median"] == 1600
    # mechanism from the replay of quick's paper-code seed 0 (--variants-from variants included)
    assert rows["acc-fp32"]["mechanism_share"] == pytest.approx(0.8)
    assert rows["fa2-acc-bf16"]["mechanism_share"] == pytest.approx((0.55 - 0.1) / (1.0 - 0.1))
    assert rows["pbar-fp32"]["mechanism_share"] is None  # not replayed
    assert ranking.mechanism_from == ["paper-code seed 0 (suite quick)"]


def test_readings_are_honest_about_three_seeds(tmp_path: Path, make) -> None:
    rows = {r["variant"]: r for r in _report(tmp_path, make).ranking.rows}
    p = fisher_exact(0, 3, 3, 3)
    assert p == pytest.approx(0.1)
    assert rows["acc-fp32"]["reading"] == (
        "acc-fp32: restoring accumulator=fp32 removes the explosion in 3 of 3 seeds "
        f"(paper-code 3/3): a lead that accumulator=fp32 is needed, not significant (Fisher p = "
        f"{p:.2g}; 3 vs 3 seeds cannot reach p < 0.05)"
    )
    assert rows["fa2-acc-bf16"]["reading"].startswith(
        "fa2-acc-bf16: adding accumulator=bf16 to fa2 explodes in 3 of 3 (fa2 0/3): a lead that "
        "accumulator=bf16 is enough, not significant"
    )
    assert rows["score-fp32"]["reading"] == (
        "score-fp32: no effect: restoring score_precision=fp32 still explodes in 3 of 3 "
        "(paper-code 3/3)"
    )
    assert rows["fa2-score-bf16"]["reading"].startswith("fa2-score-bf16: no effect: adding")
    fp32 = rows["fp32"]["reading"]
    assert fp32.startswith("fp32: neither design: its changes to fa2 (p_bar_precision=fp32")
    assert fp32.endswith("are not paper-code's settings; explodes in 0 of 3 (fa2 0/3)")
    assert rows["fp32"]["baseline_setting"] is False and rows["fp32"]["rank"] is None
    ranked = sorted((r for r in rows.values() if r["rank"]), key=lambda r: r["rank"])
    assert [r["variant"] for r in ranked] == [
        "acc-fp32",
        "fa2-acc-bf16",
        "pbar-fp32",
        "fa2-score-bf16",
        "score-fp32",
    ]  # fmt: skip  (score: mean of Δp and the bias share)
    assert "reading" not in rows["paper-code"]


def test_a_reading_names_the_seeds_that_ran_away_short_of_the_rule(tmp_path: Path, make) -> None:
    quick, attr = _digests(tmp_path, make)
    data = json.loads(attr.read_text())
    norms = [0.3] * 20 + [60.0]  # 200× its earlier median at step 2,500
    for cell in data["cells"]:  # pbar-fp32 seed 1 diverged at 2,900: counted as exploding
        if (cell["meta"]["variant"], cell["meta"]["seed"]) in (("acc-fp32", 1), ("pbar-fp32", 1)):
            cell["loss"] = [[500 + 100 * i, 1.0, g] for i, g in enumerate(norms)]
    attr.write_text(json.dumps(data))
    (report,) = build_digest_reports(load_digests([quick, attr]), suite="attr")
    rows = {r["variant"]: r for r in report.ranking.rows}
    assert rows["acc-fp32"]["failed"] == 0  # the count stays the loss rule's
    assert rows["acc-fp32"]["reading"].endswith(
        "; counted as not exploding but ran away in the gradient norm: seed 1"
    )
    assert "ran away" not in rows["pbar-fp32"]["reading"]


def test_more_seeds_make_a_finding(make) -> None:
    from flashprobe.reporting.digest.ranking import reading

    row = {"variant": "v", "component": "x=1", "design": "restore", "failed": 0, "seeds": 6,
           "fisher_p": fisher_exact(0, 6, 6, 6)}  # fmt: skip
    ref = {"variant": "b", "failed": 6, "seeds": 6}
    assert reading(row, ref, "b") == (
        f"v: restoring x=1 removes the explosion in 6 of 6 seeds (b 6/6): x=1 is needed "
        f"(Fisher p = {fisher_exact(0, 6, 6, 6):.2g})"
    )
    ref["failed"] = 0
    assert reading(row, ref, "b").startswith("v: cannot tell: b did not explode")


def test_rendered_markdown_text_and_json(tmp_path: Path, make) -> None:
    report = _report(tmp_path, make)
    md = render_digest_reports([report], "markdown")
    section = md.split("## Ranking: one component restored", 1)[1].split("\n## ", 1)[0]
    assert "Baseline: paper-code (suite quick); safe: fa2." in section
    (line,) = [x for x in section.splitlines() if x.startswith("| ") and "acc-fp32 " in x]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:] == ["acc-fp32", "restore", "accumulator=fp32", "0,1,2", "0/3", "-", "1",
                         f"{fisher_exact(0, 3, 3, 3):.3g}", "paper-code", "80%"]  # fmt: skip
    (base,) = [x for x in section.splitlines() if "paper-code (suite quick)" in x and "|" in x]
    assert "3/3 (0,1,2)" in base and "| 1659 " in base
    assert "- acc-fp32: restoring accumulator=fp32 removes the explosion" in section
    assert all(len(x) <= 100 for x in section.splitlines() if not x.startswith("|"))
    text = render_digest_reports([report], "text")
    ranking_text = text.split("Ranking: one component restored", 1)[1].split("Spectral norm")[0]
    assert all(len(x) <= 100 for x in ranking_text.splitlines()), max(
        ranking_text.splitlines(), key=len
    )
    data = json.loads(render_digest_reports([report], "json"))[0]["ranking"]
    assert data["baseline_suite"] == "quick" and data["safe"] == "fa2"
    row = next(r for r in data["rows"] if r["variant"] == "fa2-acc-bf16")
    assert row["design"] == "add" and row["failed_seeds"] == [0, 1, 2]
    assert row["failure_steps"] == {"0": 2000, "1": 2400, "2": 2200} and row["steps_median"] == 2200
    assert row["rate_lo"] is not None and row["reading"].startswith("fa2-acc-bf16: adding")


def test_a_median_step_between_two_seeds_shows_its_half_step(
    tmp_path: Path, make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two failed seeds: the median step is their mean, 2178.5 (not 2.18e+03)."""
    kernel, _ = ATTR["pbar-fp32"]
    monkeypatch.setitem(ATTR, "pbar-fp32", (kernel, (1493, 2864, None)))
    report = _report(tmp_path, make)
    rows = {r["variant"]: r for r in report.ranking.rows}
    assert rows["pbar-fp32"]["steps_median"] == 2178.5
    section = render_digest_reports([report], "markdown").split("## Ranking", 1)[1]
    (line,) = [x for x in section.splitlines() if x.startswith("| ") and " pbar-fp32 " in x]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[RANKING_COLS.index("median step")] == "2178.5"
    text = render_digest_reports([report], "text").split("Ranking", 1)[1].split("Spectral")[0]
    assert "2178.5" in text and "e+03" not in text


def test_safe_given_and_no_replay(tmp_path: Path, make) -> None:
    report = _report(tmp_path, make, safe="fp32", replay=False)
    ranking = report.ranking
    assert ranking.safe == "fp32"
    rows = {r["variant"]: r for r in ranking.rows}
    assert rows["fa2"]["design"] in ("restore", "add") and rows["fp32"]["design"] == "safe"
    assert all(r["mechanism_share"] is None for r in rows.values() if "mechanism_share" in r)
    assert "no replay of paper-code's captures in the digests" in " ".join(report.notes)
    with pytest.raises(FlashprobeError, match="no variant 'nope' \\(--safe\\)"):
        _report(tmp_path, make, safe="nope")


def test_an_old_digest_without_configs_renders_with_a_note(tmp_path: Path, make) -> None:
    cells = [make.cell("paper-code", s, suite="q", planned=None, diverged=1500) for s in SEEDS]
    cells += [make.cell("acc-fp32", s, suite="q", planned=None, reached=4000) for s in SEEDS]
    path = make.digest(tmp_path / "old.json", cells)
    (report,) = build_digest_reports(load_digests([path]), reference="paper-code")
    assert report.ranking is None
    assert "no ranking: the digests hold no config of paper-code (format v1)" in report.notes
    text = render_digest_reports([report], "markdown")
    assert "## Ranking" not in text and "no ranking: the digests hold no config" in text
    assert json.loads(render_digest_reports([report], "json"))[0]["ranking"] is None


def test_the_v1_paper_code_fa2_digest_has_no_ranking(tmp_path: Path) -> None:
    old = (
        Path(__file__).parents[3] / "docs" / "results" / "loss-explosion-adamw-paper-code-fa2.json"
    )
    (report,) = build_digest_reports(load_digests([old]), reference="paper-code")
    assert report.ranking is None
    assert "no ranking: the digests hold no config of paper-code (format v1)" in report.notes


def test_two_replays_pool_by_replayed_rows(tmp_path: Path, make) -> None:
    paths = _digests(tmp_path, make)
    data = json.loads(paths[0].read_text())
    second = _replay()
    second["summary"] = {"paper-code": {"delta_bias": 4.0, "replayed_rows": 2048,
                                        "delta_t_max": -3.0}}  # fmt: skip
    data["cells"][1]["replay"] = second  # quick's paper-code seed 1, replayed alone
    paths[0].write_text(json.dumps(data))
    (report,) = build_digest_reports(load_digests(paths), suite="attr")
    ranking = report.ranking
    rows = {r["variant"]: r for r in ranking.rows}
    pooled = (1.0 * 4096 + 4.0 * 2048) / (4096 + 2048)  # Σ |Σ δ error| / Σ rows, as summarise
    assert rows["paper-code"]["delta_bias"] == pytest.approx(pooled)
    assert rows["acc-fp32"]["mechanism_share"] == pytest.approx(1 - 0.2 / pooled)
    assert ranking.mechanism_from == [
        "paper-code seed 0 (suite quick)", "paper-code seed 1 (suite quick)",
    ]  # fmt: skip
    notes = " ".join(report.notes)
    assert "replayed on some of paper-code's runs only: acc-fp32, fa2, fa2-acc-bf16" in notes
    assert "the bias shares are noise" not in notes  # paper-code's largest |t| is 9


def test_an_unbiased_baseline_makes_the_shares_noise(tmp_path: Path, make) -> None:
    paths = _digests(tmp_path, make)
    data = json.loads(paths[0].read_text())
    data["cells"][0]["replay"]["summary"]["paper-code"]["delta_t_max"] = -2.1
    paths[0].write_text(json.dumps(data))
    (report,) = build_digest_reports(load_digests(paths), suite="attr")
    assert "(largest |t| 2.1 < 5): the bias shares are noise" in " ".join(report.notes)


def test_a_suite_of_references_only_has_no_ranking(tmp_path: Path, make) -> None:
    cells = [_cell(make, v, s, "controls", {"preset": v}, 4000, None)
             for v in ("fa2", "fp32") for s in SEEDS]  # fmt: skip
    suites = {"controls": {"replay": {"baseline": "fa2"}}}
    (report,) = build_digest_reports(load_digests([make.digest(tmp_path / "c.json", cells,
                                                               suites)]))  # fmt: skip
    assert report.ranking is None and not any("ranking" in n for n in report.notes)
    assert "Ranking" not in render_digest_reports([report], "text")
    cells += [_cell(make, "fa2-acc-bf16", s, "controls", {"preset": "fa2", "accumulator": "bf16"},
                    4000, 900) for s in SEEDS]  # fmt: skip
    (report,) = build_digest_reports(load_digests([make.digest(tmp_path / "d.json", cells,
                                                               suites)]))  # fmt: skip
    rows = {r["variant"]: r for r in report.ranking.rows}
    assert rows["fa2-acc-bf16"]["design"] == "restore"  # one change from the baseline fa2
    assert rows["fa2-acc-bf16"]["reading"].startswith("fa2-acc-bf16: cannot tell: fa2 did not")


def test_an_add_variant_before_its_safe_has_run_is_unjudged_not_a_restore(
    tmp_path: Path, make
) -> None:
    """The add design's reference (replay.safe) not run yet: its config comes from the suite's
    declaration, so fa2-score-bf16 is still an add of one component, left unjudged and
    unranked (it used to be a restore of fa2's four differences from paper-code)."""
    add = {"kernel": {"preset": "fa2", "score_precision": "bf16"}}
    declared = {"name": "attr", "seeds": [0], "branch": {"from": "paper-code", "step": 500},
                "replay": {"baseline": "paper-code", "safe": "fa2"},
                "base": {"kernel": {"preset": "paper-code"}, "train": {"device": "cpu"}},
                "variants": {"paper-code": {}, "fa2": {"kernel": {"preset": "fa2"}},
                             "fp32": {"kernel": {"preset": "fp32"}},
                             "score-fp32": {"kernel": {"score_precision": "fp32"}},
                             "fa2-score-bf16": add}}  # fmt: skip
    expanded = {c.variant: resolve_cell_config(c.config).to_dict()
                for c in expand_suite(declared).cells}  # fmt: skip
    cells = []
    for seed in SEEDS:
        for variant, planned, diverged in (("paper-code", 4000, 1500 + seed),
                                           ("score-fp32", 3400, None), ("fp32", 3400, None),
                                           ("fa2-score-bf16", 3400, None)):  # fmt: skip
            cell = make.cell(variant, seed, suite="attr", planned=planned, diverged=diverged)
            cell["config"] = expanded[variant]
            cells.append(cell)
    path = make.digest(tmp_path / "attr.json", cells, {"attr": declared})
    (report,) = build_digest_reports(load_digests([path]), suite="attr")
    rows = {r["variant"]: r for r in report.ranking.rows}
    assert report.ranking.safe == "fa2" and "fa2" not in rows
    add = rows["fa2-score-bf16"]
    assert (add["design"], add["component"], add["reference"], add["rank"]) == (
        "add", "score_precision=bf16", "fa2", None,
    )  # fmt: skip
    assert add["fisher_p"] is None and add["delta_p"] is None
    assert (
        "not judged: its reference fa2 has no run with an outcome in this suite" in add["reading"]
    )
    assert not any("safe: fp32 (inferred" in n for n in report.notes)  # the declared one
    assert (rows["score-fp32"]["design"], rows["score-fp32"]["rank"]) == ("restore", 1)
    assert any("safe: fa2 has no run in this suite yet (its config is its declaration)" in n
               for n in report.notes)  # fmt: skip
    text = render_digest_reports([report], "markdown")
    assert "| -      | fa2-score-bf16" in text or "fa2-score-bf16: not judged" in text
    # a declaration that does not resolve (an older format) leaves the old behaviour: no crash
    assert declared_config({"variants": {"fa2": {"kernel": {"preset": "nope"}}}}, "fa2") is None
    assert declared_config(declared, "missing") is None
    # fa2 has runs now, cut before an outcome: still unjudged, and unranked (nothing to rank by)
    for seed in SEEDS:
        cell = make.cell("fa2", seed, suite="attr", planned=3400, finished=False, reached=900)
        cell["config"] = expanded["fa2"]
        cells.append(cell)
    path = make.digest(tmp_path / "attr2.json", cells, {"attr": declared})
    (report,) = build_digest_reports(load_digests([path]), suite="attr")
    rows = {r["variant"]: r for r in report.ranking.rows}
    assert rows["fa2"]["design"] == "safe"
    add = rows["fa2-score-bf16"]
    assert (add["design"], add["rank"], add["unjudged"]) == ("add", None, True)
    assert "not judged" in add["reading"] and "not judged" in add["verdict"]


def test_the_ranked_runs_pool_by_switch_value(tmp_path: Path, make) -> None:
    """attribution.pooling on the ranking's runs: a bf16 running accumulator (and so ℓ) in
    paper-code, score-fp32, pbar-fp32 and fa2-acc-bf16 fails 10 of 12 seeds, the rest 0 of 12."""
    report = _report(tmp_path, make)
    assert report.ranking is not None
    top = report.ranking.pooled[0]
    assert (top["switch"], top["value"], top["same_split"]) == (
        "accumulator",
        "bf16",
        "l_precision",
    )
    assert top["variants"] == "fa2-acc-bf16, paper-code, pbar-fp32, score-fp32"
    assert (top["failed"], top["seeds"], top["rest_failed"], top["rest_seeds"]) == (10, 12, 0, 12)
    assert top["fisher_p"] == pytest.approx(fisher_exact(10, 12, 0, 12))
    assert top["adjusted_p"] == pytest.approx(
        min(1.0, top["fisher_p"] * len(report.ranking.pooled))
    )
    md = render_digest_reports([report], "markdown")
    section = md.split("## Pooled by switch value", 1)[1].split("\n## ", 1)[0]
    (line,) = [x for x in section.splitlines() if x.startswith("| accumulator ")]
    assert "| 10/12 " in line and "| 0/12 " in line
    text = render_digest_reports([report], "text")
    assert "Pooled by switch value" in text
    pooled_text = text.split("Pooled by switch value", 1)[1].split("Spectral norm")[0]
    assert all(len(x) <= 100 for x in pooled_text.splitlines())
    data = json.loads(render_digest_reports([report], "json"))[0]["ranking"]
    assert data["pooled"][0]["failed"] == 10


def test_two_variants_have_no_pooled_screen(tmp_path: Path, make) -> None:
    """paper-code against fa2 alone: every switch splits them one way, which the ranking says."""
    pc, fa2 = {"preset": "paper-code"}, {"preset": "fa2"}
    cells = [_cell(make, "paper-code", s, "quick", pc, 4000, d) for s, d in enumerate((1421, 1659))]
    cells += [_cell(make, "fa2", s, "quick", fa2, 4000, None) for s in (0, 1)]
    path = make.digest(tmp_path / "q.json", cells)
    (report,) = build_digest_reports(load_digests([path]), reference="paper-code")
    assert report.ranking is not None and len(report.ranking.pooled) == 1  # one split only
    assert "Pooled by switch value" not in render_digest_reports([report], "markdown")
