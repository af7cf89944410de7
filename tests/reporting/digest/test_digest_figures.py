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
