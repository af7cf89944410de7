"""digest.attention: per-layer series and the first → last-before-divergence summary."""

from __future__ import annotations

from pathlib import Path

from flashprobe.reporting.digest import attention as att
from flashprobe.reporting.digest.loader import load_digest


def _record(step, logits, ties, ones):
    return {"step": step, "max_logit": logits, "tie_events": ties, "p_bar_ones": ones}


RECORDS = [
    _record(9, {"0": 5.0, "1": 7.0}, {"0": 10.0, "1": 30.0}, {"0": 100.0, "1": 50.0}),
    _record(19, {"0": 50.0, "1": None}, {"0": 12.0, "1": 8.0}, {"0": 90.0, "1": 200.0}),
    _record(29, {"0": 900.0, "1": 1.0}, {"0": 1.0, "1": 1.0}, {"0": 1.0, "1": 1.0}),
]


def _cell(tmp_path: Path, make, records, **kwargs):
    path = make.digest(tmp_path / "d.json", [make.cell("a", 0, attention=records, **kwargs)])
    return load_digest(path).cells[0]


def test_series(tmp_path: Path, make) -> None:
    records = _cell(tmp_path, make, RECORDS).attention
    assert att.layer_series(records, "max_logit") == {
        0: [(9, 5.0), (19, 50.0), (29, 900.0)],
        1: [(9, 7.0), (29, 1.0)],  # None left out
    }
    assert att.total_series(records, "tie_events") == [(9, 40.0), (19, 20.0), (29, 2.0)]
    assert att.max_series(records, "max_logit") == [(9, 7.0), (19, 50.0), (29, 900.0)]


def test_summary_stops_before_the_divergence(tmp_path: Path, make) -> None:
    summary = att.summarise(_cell(tmp_path, make, RECORDS, diverged=25))
    assert summary.first_step == 9 and summary.end_step == 19
    assert summary.peak_logit == (50.0, 0, 19)  # the 900 at step 29 is after the divergence
    first, end = summary.ties
    assert (first.total, first.top_layer) == (40.0, 1)
    assert (end.total, end.top_layer, end.top) == (20.0, 0, 12.0)
    assert att.AttentionSummary.change(summary.p_bar_ones) == "150 → 290 (layer 1)"
    assert summary.crossings == ((1e3, None), (4e3, None), (1e4, None))
    whole = att.summarise(_cell(tmp_path, make, RECORDS))
    assert whole.end_step == 29 and whole.peak_logit == (900.0, 0, 29)
    big = [_record(9, {"0": 999.0}, {}, {}), _record(19, {"0": 3.0, "1": 4e3}, {}, {}),
           _record(29, {"0": 2e4}, {}, {})]  # fmt: skip
    crossings = att.summarise(_cell(tmp_path, make, big)).crossings
    assert crossings == ((1e3, 19), (4e3, 19), (1e4, 29))
    assert att.summarise(_cell(tmp_path, make, big, diverged=25)).crossings[2] == (1e4, None)
    capped = att.summarise(_cell(tmp_path, make, RECORDS), horizon=20)
    assert capped.end_step == 19


def test_uncounted_and_absent(tmp_path: Path, make) -> None:
    sdpa = [_record(9, {"0": 3.0}, {"0": None}, {"0": None})]
    summary = att.summarise(_cell(tmp_path, make, sdpa))
    assert summary.ties == (None, None) and att.AttentionSummary.change(summary.ties) is None
    assert summary.to_dict()["peak_logit"] == {"value": 3.0, "layer": 0, "step": 9}
    assert summary.to_dict()["logit_crossings"][0] == {"threshold": 1e3, "step": None}
    assert att.summarise(_cell(tmp_path, make, [])) is None


def test_the_softmax_sum_bias_is_the_median_of_layer_means_before_the_divergence(
    tmp_path: Path, make
) -> None:
    biases = ({"0": 1e-4, "1": 3e-4}, {"0": 3e-4, "1": None}, {"0": 1.0, "1": 1.0})
    records = [dict(r, softmax_sum_bias=b) for r, b in zip(RECORDS, biases, strict=True)]
    summary = att.summarise(_cell(tmp_path, make, records, diverged=25))
    means = att.mean_series(summary.cell.attention, "softmax_sum_bias")
    assert [step for step, _ in means] == [9, 19, 29]
    assert [round(v, 12) for _, v in means] == [2e-4, 3e-4, 1.0]  # None left out
    # steps 9 and 19: the 1.0 at step 29 is after the divergence
    assert round(summary.sum_bias, 12) == 2.5e-4
    assert summary.to_dict()["softmax_sum_bias_median"] == summary.sum_bias
    assert att.summarise(_cell(tmp_path, make, RECORDS)).sum_bias is None  # not recorded
