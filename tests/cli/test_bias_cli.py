"""`flashprobe bias` on the command line: formats, schema, help, one-line errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest
import torch

FAST = ["--rows", "32", "--keys", "256", "--head-dim", "16"]


def test_json_schema(run_cli) -> None:
    result = run_cli(
        "bias", *FAST, "--variant", "paper-code", "--variant", "exact:ties=1", "--format", "json"
    )
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert set(doc) >= {"config", "worked_example", "variants", "notes", "environment"}
    w = doc["worked_example"]
    assert w["exact"] == -4.703990459442139 and w["bf16"] == -4.71875
    assert w["error"] == -0.014759540557861328
    assert (w["round_bit"], w["bf16_fraction"], w["sticky_nonzero"]) == (1, "0010110", True)
    assert doc["config"]["seed"] == 0 and doc["config"]["rows"] == 32
    assert doc["config"]["variants"] == ["paper-code", "exact:ties=1"]
    paper, exact = doc["variants"]
    for key in (
        "name",
        "spec",
        "mean_error",
        "std_error",
        "t_stat",
        "frac_negative",
        "mean_abs_error",
        "excess_mean",
        "p_bar_ones_per_row",
        "tie_events_per_row",
        "away_from_zero",
        "verdict",
    ):
        assert key in paper, key
    assert "excess_share" in paper and "shrunk_rows" in paper
    assert "excess" in doc["verdict_method"] and "ideal rounding" in doc["verdict_method"]
    assert exact["verdict"] == "ideal rounding"
    assert paper["spec"]["accumulator"] == "bf16" and paper["ties"] == 2
    assert exact["spec"] is None and exact["ties"] == 1
    env = doc["environment"]
    assert env["torch"] == torch.__version__ and env["device"] == "cpu"
    assert set(env) >= {"flashprobe", "triton", "python", "platform", "gpu", "git_sha"}


def test_table_shows_the_bits_and_the_variants(run_cli) -> None:
    result = run_cli("bias", *FAST, "--variant", "fa2", "--variant", "sfa:beta=4")
    assert result.code == 0, result.err
    assert "-10.01011010000111000101110" in result.out
    assert "round bit 1" in result.out and "-4.71875" in result.out
    assert "sfa:beta=4" in result.out and "Notes:" in result.out
    # the output says what the verdict means, and the column it reads
    assert "Verdict: read off the excess" in result.out and "excess/rnd" in result.out


def test_csv_has_one_line_per_variant(run_cli) -> None:
    result = run_cli("bias", *FAST, "--variant", "fa2", "--variant", "exact", "--format", "csv")
    assert result.code == 0, result.err
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert [r["name"] for r in rows] == ["fa2", "exact"]
    assert rows[1]["verdict"] == "ideal rounding" and float(rows[1]["excess_share"]) == 0
    float(rows[0]["mean_error"])


def test_help_has_examples(run_cli) -> None:
    result = run_cli("bias", "--help")
    assert result.code == 0 and "Examples" in result.out and "--tail-v-mean" in result.out


@pytest.mark.parametrize(
    "args",
    [
        ["--rows", "0"],
        ["--beta", "0.5"],
        ["--beta", "4", "--variant", "fa2"],
        ["--variant", "nope"],
        ["--variant", "fa2:nope=1"],
        ["--variant", "sfa:beta=0.5"],
        ["--ties", "0"],
        ["--v-std", "-1"],
        ["--gap", "30:12"],
        ["--gap", "x"],
        ["--format", "xml"],
        ["--tie-placement", "middle"],
        ["--score-grid", "fp8"],
        ["--rows", "abc"],
    ],
)
def test_bad_input_is_one_line_exit_2(run_cli, args: list[str]) -> None:
    result = run_cli("bias", *args)
    assert result.code == 2
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert result.out == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu_console_script() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flashprobe", "bias", "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "cuda" in proc.stderr
