"""digest.tables: the per-suite reports as markdown, text and JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from flashprobe.reporting.digest.report import build_digest_reports, load_digests
from flashprobe.reporting.digest.tables import render_digest_reports
from flashprobe.reporting.digest.writer import write_digest


# -- the δ replay section -------------------------------------------------------------------
def _tables(text: str, heading: str) -> list[list[dict[str, str]]]:
    """The markdown tables under `heading` (until the next heading), as rows of column → cell."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    tables, current = [], []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip("|").split("|")])
        elif current:
            header, _, *body = current
            tables.append([dict(zip(header, row, strict=True)) for row in body])
            current = []
    return tables


def _shown(cell: str) -> float | None:
    return None if cell == "-" else float(cell)


def test_the_replay_section_shows_the_replay_json(replayed_store: Path, tmp_path: Path) -> None:
    from flashprobe.reporting.digest.replay import pooled_t
    from flashprobe.store import reader as sr
    from flashprobe.store.replay_results import read_replay

    out = tmp_path / "replayed.json"
    write_digest(replayed_store, out)
    (report,) = build_digest_reports(load_digests([out]), reference="touchy")
    (cell,) = [c for c in sr.read_cells(replayed_store) if c.variant == "touchy"]
    doc = read_replay(cell)
    diverged = cell.summary["diverged_step"]
    assert [c.label for c in report.replayed] == ["touchy seed 0"]
    text = render_digest_reports([report], "markdown")
    heading = "## δ replay: touchy seed 0"
    assert heading in text
    assert f"the run diverged at step {diverged}: the captures before it" in text
    assert "(left out: the capture at step 25)" in text
    delta, gradients, summary = _tables(text, heading)
    assert [r["variant"] for r in gradients] == ["touchy", "paper-code"]
    for row in gradients:
        for step in (5, 9):  # the steps before the divergence
            per_layer = {}
            for layer in (0, 1):
                now = [
                    r
                    for r in doc["records"]
                    if (r["variant"], r["layer"], r["step"]) == (row["variant"], layer, step)
                ]
                err = sum((r["dq_rel"] * r["dq_ref_norm"]) ** 2 for r in now)
                per_layer[layer] = math.sqrt(err / sum(r["dq_ref_norm"] ** 2 for r in now))
            worst = max(per_layer, key=per_layer.get)
            mean, rest = row[f"dQ error @ {step}"].split(" (")
            assert float(mean) == pytest.approx(sum(per_layer.values()) / 2, rel=5e-3)
            assert rest == f"{worst}: {per_layer[worst]:.3g})"
        assert "dQ error @ 25" not in row
    seen = [(r["variant"], int(r["layer"]), int(r["step"])) for r in delta]
    assert seen == [(v, layer, s) for v in ("touchy", "paper-code") for layer in (0, 1)
                    for s in (5, 9)]  # fmt: skip
    for row in delta:
        key = (row["variant"], int(row["layer"]))
        recs = [r for r in doc["records"] if (r["variant"], r["layer"]) == key]
        now = [r for r in recs if r["step"] == int(row["step"])]
        mean = sum(r["delta_sum"] for r in now) / sum(r["rows"] for r in now)
        running = sum(r["delta_sum"] for r in recs if r["step"] <= int(row["step"]))
        t = pooled_t([(r["rows"], r["delta_mean"], r["delta_t"]) for r in now])
        assert _shown(row["δ error mean"]) == pytest.approx(mean, rel=5e-3)
        assert row["sign"] == ("+" if mean > 0 else "−")
        assert _shown(row["t"]) == pytest.approx(t, rel=5e-3, abs=5e-4)
        assert _shown(row["running sum"]) == pytest.approx(running, rel=5e-3)
        assert row["heads > 0"] == f"{sum(r['delta_mean'] > 0 for r in now)}/{len(now)}"
    assert [r["variant"] for r in summary] == ["touchy", "paper-code"]
    for row in summary:
        want = doc_summary = json.loads((replayed_store / "replayed" / "replay.json").read_text())[
            "summary"
        ][row["variant"]]
        assert doc_summary is want
        assert _shown(row["δ bias per row"]) == pytest.approx(want["delta_bias"], rel=5e-3)
        assert _shown(row["largest δ t"]) == pytest.approx(want["delta_t_max"], rel=5e-3)
        assert row["matches capture"] == {True: "yes", None: "-"}[want["matches_capture"]]
    data = json.loads(render_digest_reports([report], "json"))[0]
    (replay,) = data["replay"]
    assert replay["variant"] == "touchy" and replay["diverged_step"] == diverged
    assert [r[0] for r in replay["delta"]["paper-code"]["1"]] == [5, 9, 25]  # JSON: every step
    assert (
        "δ replay"
        not in render_digest_reports(
            build_digest_reports(load_digests([out]), suite="replayed", reference="touchy"), "text"
        ).split("Attention")[0]
    )  # after the attention section, as in markdown


def test_with_many_replayed_variants_the_delta_table_keeps_the_runs_own(
    replayed_store: Path, tmp_path: Path, monkeypatch
) -> None:
    """Past DELTA_VARIANTS_SHOWN variants (the AdamW replay has 23 × 12 layers × 5 steps), the
    per layer and step table shows the run's own variant; the summary keeps every variant."""
    from flashprobe.reporting.digest import tables

    monkeypatch.setattr(tables, "DELTA_VARIANTS_SHOWN", 1)
    out = tmp_path / "replayed.json"
    write_digest(replayed_store, out)
    (report,) = build_digest_reports(load_digests([out]), reference="touchy")
    text = render_digest_reports([report], "markdown")
    heading = "## δ replay: touchy seed 0"
    assert "per layer and step: touchy only, the other 1 replayed variants are summarised" in text
    delta, _gradients, summary = _tables(text, heading)
    assert {r["variant"] for r in delta} == {"touchy"} and len(delta) == 4  # 2 layers × 2 steps
    assert [r["variant"] for r in summary] == ["touchy", "paper-code"]
    data = json.loads(render_digest_reports([report], "json"))[0]
    assert set(data["replay"][0]["delta"]) == {"touchy", "paper-code"}  # JSON: every variant


def test_old_digests_render_without_a_replay_section(tmp_path: Path, make) -> None:
    results = Path(__file__).parents[3] / "docs" / "results"
    old = results / "loss-explosion-adamw-paper-code-fa2.json"
    v2 = make.digest(tmp_path / "v2.json", [make.cell("paper-code", 5, diverged=1500)])
    reports = build_digest_reports(load_digests([old, v2]), reference="paper-code")
    text = render_digest_reports(reports, "markdown")
    assert "δ replay:" not in text
    assert f"digests of format v1/v2 ({old.name}) carry no δ replay results" in text
    assert "digests of format v1/v2 (v2.json) carry no δ replay results" in text
    (quick,) = [r for r in reports if r.suite == "quick"]
    rows = {o.variant: o for o in quick.outcomes}
    assert [s.step for s in rows["paper-code"].diverged] == [1421, 3225, 1659, 1512, 1755]
    assert "| 0: no outcome (cut at ≥2300); 1: no outcome (cut at ≥2300); 2: no outcome" in text
    assert json.loads(render_digest_reports(reports, "json"))[0]["replay"] == []
    assert render_digest_reports(reports, "text")


# -- steps ----------------------------------------------------------------------------------
def test_median_steps_show_whole_or_half_steps_never_in_e_notation(tmp_path: Path, make) -> None:
    """A median of an even number of divergence steps can end in .5: it shows as 2178.5 (as
    1659 when whole), not with three significant digits (2.18e+03), and a long run's median in
    the control check keeps its .5 (`:g` printed 123456.5 as 123456)."""
    steps = 300_000
    digest = make.digest(tmp_path / "d.json", [
        make.cell("paper-code", 0, planned=steps, diverged=123_456),
        make.cell("paper-code", 1, planned=steps, diverged=123_457),
        make.cell("o-fp32", 0, planned=steps, diverged=2864),
        make.cell("o-fp32", 1, planned=steps),
        make.cell("o-fp32", 2, planned=steps, diverged=1493),
        make.cell("fa2", 0, planned=steps, diverged=1659),
    ])  # fmt: skip
    (report,) = build_digest_reports(load_digests([digest]), reference="paper-code")
    text = render_digest_reports([report], "markdown")
    (outcomes,) = _tables(text, "## Outcomes")
    median = {row["variant"]: row["median divergence step"] for row in outcomes}
    assert median == {"paper-code": "123456.5", "o-fp32": "2178.5", "fa2": "1659"}
    control = text.split("## Control check", 1)[1]
    assert "paper-code: median divergence step 123456.5 (diverged seeds" in control
    assert "twice 246913." in control
    (checks,) = _tables(text, "## Control check")
    assert {row["bound (steps)"] for row in checks} == {"246913"}
    assert "e+0" not in render_digest_reports([report], "text")
