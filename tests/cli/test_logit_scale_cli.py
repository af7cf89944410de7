"""`flashprobe logit-scale` on the command line: table, JSON, CSV, one-line errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

FAST = ["--seq", "32", "--heads", "1", "--head-dim", "16", "--logits", "10,1000"]


def test_table(run_cli) -> None:
    result = run_cli("logit-scale", *FAST, "--variant", "fa2", "--variant", "paper-code")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("Relative L2 error against fp64, mean over seeds 0 (n = 1)")
    assert "dQ ÷ torch" in lines[1]
    body = [line.split() for line in lines[3:]]
    assert [(row[0], row[1]) for row in body] == [
        ("10", "fa2"), ("10", "paper-code"), ("10", "torch-bf16"),
        ("1000", "fa2"), ("1000", "paper-code"), ("1000", "torch-bf16"),
    ]  # fmt: skip
    assert body[2][3] == "-" and body[2][-2] == "1"  # torch: no δ; its own dQ ratio
    assert float(body[0][-1]) > 0.99  # fa2's dQ points where fp64's does


def test_json_and_csv(run_cli) -> None:
    result = run_cli("logit-scale", *FAST, "--variant", "fa2", "--seed", "3", "--format", "json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["config"]["seeds"] == [3] and doc["config"]["logits"] == [10.0, 1000.0]
    assert [r["variant"] for r in doc["rows"]] == ["fa2", "torch-bf16"] * 2
    assert doc["environment"]["git_sha"] is None or isinstance(doc["environment"]["git_sha"], str)
    result = run_cli("logit-scale", *FAST, "--variant", "fa2", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert [r["variant"] for r in rows] == ["fa2", "torch-bf16"] * 2
    assert float(rows[1]["dq_vs_torch"]) == 1.0


def test_suite_variants_left_out_are_named(run_cli) -> None:
    result = run_cli("logit-scale", *FAST, "--logits", "100", "--variants-from", "gpt2")
    assert result.code == 0, result.err
    assert "left out of gpt2" in result.err and "fp32-attention" in result.err
    assert "delta-dp-p" in result.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--logits", "ten"], "--logits must be numbers separated by commas"),
        (["--logits", "10,,20"], "--logits must be numbers separated by commas"),
        (["--logits", "-5"], "--logits must be positive"),
        (["--variant", "nope"], "unknown preset 'nope'"),
        (["--variants-from", "missing.yaml"], "--variants-from missing.yaml"),
        (["--variants-from", ""], "--variants-from is empty"),
        (["--head-dim", "24"], "--head-dim must be a power of two"),
        (["--format", "xml"], "--format must be one of"),
        (["--seed", "99999999999999999999"], "--seed must be in"),
    ],
)
def test_bad_input_is_one_line(run_cli, args: list[str], message: str) -> None:
    result = run_cli("logit-scale", "--seq", "16", *args)
    assert result.code == 2
    assert message in result.err and len(result.err.strip().splitlines()) == 1
    assert "Traceback" not in result.err


def test_plot_is_written_and_never_overwritten(run_cli, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    figure = tmp_path / "errors.png"
    result = run_cli("logit-scale", *FAST, "--variant", "fa2", "--plot", str(figure))
    assert result.code == 0, result.err
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    before = figure.read_bytes()
    result = run_cli("logit-scale", *FAST, "--variant", "fa2", "--plot", str(figure))
    assert result.code == 2 and "exists; refusing to overwrite it" in result.err
    assert figure.read_bytes() == before
    figure.write_bytes(b"stale")
    result = run_cli("logit-scale", *FAST, "--variant", "fa2", "--plot", str(figure), "--force")
    assert result.code == 0, result.err
    assert figure.read_bytes() == before  # replaced by the same figure
    result = run_cli("logit-scale", *FAST, "--force")
    assert result.code == 2 and "--force applies to --plot only" in result.err
    folder = tmp_path / "folder.png"
    folder.mkdir()
    result = run_cli("logit-scale", *FAST, "--plot", str(folder), "--force")
    assert result.code == 2 and "is a folder, not a file" in result.err and folder.is_dir()
    result = run_cli("logit-scale", *FAST, "--plot", str(tmp_path / "errors.pdf"))
    assert result.code == 2 and "--plot must name a .png file" in result.err
    result = run_cli("logit-scale", *FAST, "--plot", str(figure / "under-a-file.png"))
    assert result.code == 2 and "is not a folder" in result.err and result.out == ""
