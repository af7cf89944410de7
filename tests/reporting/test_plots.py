"""`report --plot` figures: one variant order everywhere, seeds apart, a readable single step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from flashprobe.reporting import plots
from flashprobe.reporting.report import build_reports

_spec = importlib.util.spec_from_file_location(
    "replay_fixtures", Path(__file__).parents[1] / "attribution" / "test_replay.py"
)
fixtures = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fixtures)  # type: ignore[union-attr]


def _figures(report, tmp_path, monkeypatch) -> dict[str, object]:
    saved: dict[str, object] = {}

    def keep(fig, plt, path):
        saved[path.name] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots.write_plots(report, tmp_path / "fig")
    return saved


def test_variants_in_one_order_and_seeds_by_line_style(tmp_path, monkeypatch) -> None:
    root = fixtures.make_store(tmp_path / "store")
    (report,) = build_reports(root, baseline="delta-fp32")
    assert plots.variant_order(report) == ["delta-fp32", "baseline", "block-m"]
    loss = _figures(report, tmp_path, monkeypatch)["planted_loss.png"]
    ax = loss.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [f"{v} s{s}" for v in ("delta-fp32", "baseline", "block-m") for s in (0, 1)]
    lines = {str(line.get_label()): line for line in ax.get_lines()}
    for variant in ("baseline", "delta-fp32", "block-m"):
        s0, s1 = lines[f"{variant} s0"], lines[f"{variant} s1"]
        assert s0.get_color() == s1.get_color()  # one colour per variant
        assert s0.get_linestyle() != s1.get_linestyle()  # seeds apart
    colours = {lines[f"{v} s0"].get_color() for v in ("baseline", "delta-fp32", "block-m")}
    assert len(colours) == 3


def test_a_single_captured_step_gets_a_readable_axis() -> None:
    plt = plots.require_matplotlib()
    fig, ax = plt.subplots()
    plots._line(ax, [1200], [3.5e-7], color="C0", label="paper-code")
    ax.axhline(0, color="grey")
    plots._finish(ax, "captured step", "Σ δ err", None)
    assert ax.get_xlim() == (1199, 1201)
    assert [t for t in ax.get_xticks()] == [1200]
    assert ax.get_lines()[0].get_marker() == "o"  # a lone point is drawn, not an empty line
    plt.close(fig)


def test_the_loss_figure_shows_the_gradient_norm_and_marks_a_runaway(tmp_path, monkeypatch) -> None:
    import json

    from flashprobe.store import reader as sr

    root = fixtures.make_store(tmp_path / "store")
    cell = next(c for c in sr.read_cells(root) if c.variant == "block-m" and c.seed == 0)
    norms = [0.3] * 12 + [50.0]  # the 13th logged norm: 167× the median before it
    rows = [{"step": 10 * i, "loss": 1.0, "grad_norm": g} for i, g in enumerate(norms)]
    (cell.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (report,) = build_reports(root, baseline="delta-fp32")
    loss_ax, grad_ax = _figures(report, tmp_path, monkeypatch)["planted_loss.png"].axes
    assert grad_ax.get_yscale() == "log" and grad_ax.get_ylabel() == "gradient norm"
    marks = [line for line in grad_ax.get_lines() if line.get_marker() == "o"]
    assert [(list(m.get_xdata()), list(m.get_ydata())) for m in marks] == [([120], [50.0])]
    assert loss_ax.get_ylabel() == "training loss"


def test_every_figure_written_is_one_figure_paths_names(tmp_path) -> None:
    """`report --plot` refuses to overwrite the files figure_paths names: every file
    write_plots writes must be one of them."""
    from flashprobe.attribution.replay import replay_suites

    root = fixtures.make_store(tmp_path / "store")
    list(replay_suites(root, baseline="baseline"))  # the delta_cumsum figure needs a replay
    (report,) = build_reports(root)
    out = tmp_path / "fig"
    written = plots.write_plots(report, out)
    assert {p.name for p in written} >= {"planted_loss.png", "planted_delta_cumsum.png"}
    assert set(written) <= set(plots.figure_paths(report, out))
    assert sorted(out.iterdir()) == sorted(written)
