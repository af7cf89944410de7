"""digest.figures: one PNG per figure, named by what it shows, also for one-record runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashprobe.reporting.digest.report import build_digest_reports, load_digests
from flashprobe.reporting.digest.writer import write_digest

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def _pngs(paths: list[Path]) -> list[str]:
    for path in paths:
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5000
    return sorted(p.name for p in paths)


def test_figures_of_a_tiny_store(tiny_store: Path, tmp_path: Path) -> None:
    from flashprobe.reporting.digest.figures import write_figures

    digest = tmp_path / "tiny.json"
    write_digest(tiny_store, digest)
    (report,) = build_digest_reports(load_digests([digest]), reference="touchy")
    out = tmp_path / "figs"
    names = _pngs(write_figures(report, out))
    assert names == [
        "tiny_loss_grad_norm.png",
        "tiny_max_logit.png",
        "tiny_outcomes.png",
        "tiny_softmax_sum_bias.png",
        "tiny_tie_counts.png",
        "tiny_touchy_seed0_attention_per_layer.png",
        "tiny_touchy_seed0_spectral_norm.png",
    ]
    assert sorted(p.name for p in out.iterdir()) == names


def test_one_record_runs_grid_points_and_missing_series(tmp_path: Path, make) -> None:
    from flashprobe.reporting.digest.figures import write_figures

    one = {"step": 9, "max_logit": {"0": 3.0}, "tie_events": {"0": None}, "p_bar_ones": {}}
    cells = [
        make.cell("paper-code", 0, diverged=9, loss=[[9, 2.0, 0.5]], attention=[one],
                  spectral=[{"step": 9, "wq": [1.0, 2.0], "wk": [1.0, 1.5]}],
                  point=[("lr", "2e-3")]),
        make.cell("fa2", 3, point=[("lr", "2e-3")]),  # no curves at all
    ]  # fmt: skip
    digest = make.digest(tmp_path / "d.json", cells)
    (report,) = build_digest_reports(
        load_digests([digest]), reference="paper-code", chosen=["paper-code:0", "fa2:3"]
    )
    names = _pngs(write_figures(report, tmp_path / "figs"))
    assert names == [
        "s_loss_grad_norm.png",
        "s_max_logit.png",
        "s_outcomes.png",
        "s_paper-code_lr=2e-3_seed0_attention_per_layer.png",
        "s_paper-code_lr=2e-3_seed0_spectral_norm.png",
        "s_tie_counts.png",
    ]  # fa2 seed 3 has no attention or spectral records: no per-run figures


def test_the_delta_running_sum_of_a_replayed_run(replayed_store: Path, tmp_path: Path) -> None:
    from flashprobe.reporting.digest.figures import write_figures

    digest = tmp_path / "replayed.json"
    write_digest(replayed_store, digest)
    (report,) = build_digest_reports(load_digests([digest]), reference="touchy")
    names = _pngs(write_figures(report, tmp_path / "figs"))
    assert "replayed_touchy_seed0_delta_running_sum.png" in names
    assert not [n for n in names if n.startswith("replayed_paper-code_seed0_delta")]  # no replay


def test_a_borrowed_reference_replaces_the_branch_source_panel(tmp_path: Path, make) -> None:
    """A branched suite whose baseline ran only to the branch step: the figures draw the
    baseline's full runs from the other suite, on this suite's seeds only."""
    from flashprobe.reporting.digest.figures import _variants

    quick = [make.cell("paper-code", s, suite="quick", planned=4000, diverged=1400 + s,
                       loss=[[10, 2.0, 0.5], [1400, 3.0, 50.0]]) for s in (0, 1, 2)]  # fmt: skip
    attr = [make.cell("paper-code", s, suite="attr", planned=500) for s in (0, 1)]
    for s in (0, 1):
        attr.append(make.cell("score-fp32", s, suite="attr", planned=3400, loss=[[600, 1.0, 0.3]]))
        attr[-1]["meta"].update(branch_from="paper-code", branch_step=500)
    suites = {"attr": {"branch": {"from": "paper-code", "step": 500}}}
    paths = [make.digest(tmp_path / "q.json", quick),
             make.digest(tmp_path / "a.json", attr, suites)]  # fmt: skip
    (report,) = build_digest_reports(load_digests(paths), suite="attr", reference="paper-code")
    groups = dict(_variants(report))
    assert list(groups) == ["paper-code (suite quick)", "score-fp32"]
    assert [(c.suite, c.seed) for c in groups["paper-code (suite quick)"]] == [
        ("quick", 0), ("quick", 1),
    ]  # fmt: skip


def test_sum_bias_points_by_outcome(tmp_path: Path, make) -> None:
    from flashprobe.reporting.digest.figures import sum_bias_points, write_figures

    def rec(step: int, bias: float) -> dict:
        return {"step": step, "max_logit": {"0": 3.0}, "softmax_sum_bias": {"0": bias, "1": bias}}

    cells = [
        # the records after the divergence (step 40) do not count
        make.cell("paper-code", 0, diverged=40, attention=[rec(9, 2e-4), rec(19, 1e-4),
                                                           rec(29, 3e-4), rec(49, 9.0)]),
        make.cell("fa2", 0, attention=[rec(9, 5e-7)]),
        make.cell("fa2", 1, reached=30, finished=False, attention=[rec(9, -1e-7)]),  # cut
        make.cell("sdpa", 0),  # no attention records: no point
    ]  # fmt: skip
    digest = make.digest(tmp_path / "d.json", cells)
    (report,) = build_digest_reports(load_digests([digest]), reference="paper-code")
    points = sum_bias_points(report)
    assert [(label, seed, status) for _, label, seed, _, status in points] == [
        ("paper-code", 0, "diverged"),
        ("fa2", 0, "not diverged"),
        ("fa2", 1, "no outcome"),
    ]
    assert [value for *_, value, _ in points] == pytest.approx([2e-4, 5e-7, -1e-7])
    names = _pngs(write_figures(report, tmp_path / "figs"))
    assert "s_softmax_sum_bias.png" in names  # a negative median: drawn on a symlog axis


def test_the_suptitle_clears_the_panel_titles(tmp_path: Path, make, monkeypatch) -> None:
    """The per-variant figures' title sat over the first row's panel titles (tight_layout)."""
    from flashprobe.reporting.digest import figures

    saved = []
    save = figures._save

    def keep(plt, fig, *rest):  # type: ignore[no-untyped-def]
        saved.append(fig)
        return save(plt, fig, *rest)

    monkeypatch.setattr(figures, "_save", keep)
    loss = [[s, 2.0 - s / 1e3, 0.5] for s in range(0, 500, 10)]
    cells = [make.cell(f"variant-{k}", 0, loss=loss) for k in range(24)]  # a tall figure
    digest = make.digest(tmp_path / "d.json", cells)
    (report,) = build_digest_reports(load_digests([digest]), reference="variant-0")
    figures.write_figures(report, tmp_path / "figs")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = saved[0]  # the loss and gradient norm figure, laid out as saved
    renderer = FigureCanvasAgg(fig).get_renderer()
    top = fig.get_suptitle() and fig._suptitle.get_window_extent(renderer)
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_visible()]
    assert top and titles
    assert all(top.y0 >= t.y1 for t in titles), (top, max(t.y1 for t in titles))


def test_the_outcome_rows_put_the_borrowed_reference_first_and_skip_the_branch_source(
    tmp_path: Path, make
) -> None:
    """The outcomes figure's rows: a branched suite's stub source is no row, the reference's
    full runs from its own suite are, and each seed keeps its outcome and runaway."""
    from flashprobe.reporting.digest.figures import outcome_rows

    calm = [[s, 2.0, 0.3] for s in range(500, 900, 10)]
    wild = [*calm, [900, 3.5, 90.0]]
    quick = [make.cell("paper-code", s, suite="quick", planned=4000, diverged=1400 + s,
                       loss=[[10, 2.0, 0.5], [1400, 3.0, 50.0]]) for s in (0, 1)]  # fmt: skip
    attr = [make.cell("paper-code", s, suite="attr", planned=500) for s in (0, 1)]
    for s, loss in ((0, calm), (1, wild)):
        attr.append(make.cell("score-fp32", s, suite="attr", planned=3400, loss=loss))
        attr[-1]["meta"].update(branch_from="paper-code", branch_step=500)
    suites = {"attr": {"branch": {"from": "paper-code", "step": 500}}}
    paths = [make.digest(tmp_path / "q.json", quick),
             make.digest(tmp_path / "a.json", attr, suites)]  # fmt: skip
    (report,) = build_digest_reports(load_digests(paths), suite="attr", reference="paper-code")
    rows = outcome_rows(report)
    assert [label for label, _ in rows] == ["paper-code (suite quick)", "score-fp32"]
    (_, reference), (_, restored) = rows
    assert [(s.seed, s.status, s.step) for s in reference.seeds] == [
        (0, "diverged", 1400), (1, "diverged", 1401),
    ]  # fmt: skip
    assert [(s.status, s.runaway.step if s.runaway else None) for s in restored.seeds] == [
        ("not diverged", None), ("not diverged", 900),
    ]  # fmt: skip


def test_a_run_without_logged_losses_starts_at_its_branch_step(tmp_path: Path, make) -> None:
    from flashprobe.reporting.digest.figures import _start

    branched = make.cell("score-fp32", 0, planned=3400)
    branched["meta"].update(branch_from="paper-code", branch_step=500)
    digest = make.digest(tmp_path / "d.json", [branched, make.cell("paper-code", 0)])
    (loaded,) = load_digests([digest])
    assert sorted(_start(c) for c in loaded.cells) == [0, 500]


def test_every_figure_written_is_one_figure_paths_names(
    tiny_store: Path, replayed_store: Path, tmp_path: Path
) -> None:
    """`digest-report --plot` refuses to overwrite the files figure_paths names: every file
    write_figures writes, per chosen and per replayed run too, must be one of them."""
    from flashprobe.reporting.digest.figures import figure_paths, write_figures

    for store, reference in ((tiny_store, "touchy"), (replayed_store, "touchy")):
        digest = tmp_path / f"{store.parent.name}.json"
        write_digest(store, digest)
        (report,) = build_digest_reports(load_digests([digest]), reference=reference)
        out = tmp_path / store.parent.name
        written = write_figures(report, out)
        assert set(written) <= set(figure_paths(report, out))
        assert sorted(out.iterdir()) == sorted(written)
        assert any("_seed0_" in p.name for p in written)
