"""The notes under the bias table: each sentence appears when, and only when, its numbers say."""

from __future__ import annotations

import dataclasses

from flashprobe.probes.bias_config import BiasConfig
from flashprobe.probes.bias_notes import make_notes
from flashprobe.probes.bias_result import VariantResult
from flashprobe.spec import make_spec

QUIET = VariantResult(
    name="fa2", spec=make_spec("fa2"), ties=2, v_mean=-2.5, tail_v_mean=-2.5,
    mean_error=-1e-5, std_error=1e-3, row_mean_std=1e-4, t_stat=-1.0, frac_negative=0.5,
    frac_zero=0.0, frac_away=0.5, away_from_zero=1e-5, mean_abs_error=1e-3, excess_mean=0.0,
    excess_t_stat=0.5, excess_share=0.0, p_bar_ones_per_row=1.0, tie_events_per_row=1.0,
    verdict="no bias beyond rounding", rowsum_mean=0.0, rowsum_t=0.0,
)  # fmt: skip


def result(name: str, spec: str | None, **changes) -> VariantResult:
    return dataclasses.replace(
        QUIET, name=name, spec=None if spec is None else make_spec(spec), **changes
    )


def test_quiet_rows_get_only_the_counting_note() -> None:
    (note,) = make_notes([QUIET], BiasConfig())
    assert note.startswith("P̄ = 1 per row counts every tile's running max too")


def test_each_note_follows_its_numbers() -> None:
    biased = {"excess_mean": -6e-4, "excess_t_stat": -12.0, "excess_share": -0.2}
    results = [
        result("exact", None, mean_error=-3e-4, t_stat=-9.0),
        result("paper-code", "paper-code", mean_error=-8e-4, t_stat=-20.0, **biased),
        result("paper-sfa", "paper-sfa", mean_error=-1e-5, excess_mean=-2e-5),
        result("fa2", "fa2", rowsum_mean=3e-5, rowsum_t=8.0, shrunk_rows=0.25),
        result("fa2:ties=1", "fa2", ties=1),
    ]
    notes = make_notes(results, BiasConfig(v_mean=0.0))
    text = "\n".join(notes)
    assert "exact: the fp64 O rounded once to bf16 already errs by -3.00e-04" in text
    assert "paper-sfa vs paper-code: |mean error| 80x smaller" in text
    assert "fa2: |O| < 0.5·|exact O| on 25.0% of rows" in text
    assert "bf16 accumulator, unnormalised P̄V rounded (paper-code): paper-code -8.00e-04" in text
    assert "sums to 1 + a one-sided bias" in text and "fa2 +3.00e-05 (t +8.0)" in text
    assert "single max, no tie (P̄ = 1 once): fa2:ties=1" in text
    assert "v_mean = 0: V has no preferred sign" in text
