"""`flashprobe replay` and `flashprobe report` from the command line."""

from __future__ import annotations

import builtins
import importlib.util
import json
from pathlib import Path

import pytest

from flashprobe.store import reader as sr

_spec = importlib.util.spec_from_file_location(
    "replay_fixtures", Path(__file__).parents[1] / "attribution" / "test_replay.py"
)
fixtures = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fixtures)  # type: ignore[union-attr]

SMOKE = Path(__file__).parents[2] / "ablations" / "smoke.yaml"


def test_missing_corrupt_and_file_store(run_cli, tmp_path) -> None:
    result = run_cli("report", str(tmp_path / "nope"))
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert "not found" in result.err
    (tmp_path / "file").write_text("x")
    assert run_cli("report", str(tmp_path / "file")).code == 2
    root = fixtures.make_store(tmp_path / "store")
    cell = next((root / "planted").iterdir())
    (cell / "cell.json").write_text("{broken")
    result = run_cli("report", str(root))
    assert result.code == 2 and "corrupt JSON" in result.err
    assert len(result.err.strip().splitlines()) == 1
    result = run_cli("replay", str(tmp_path / "nope"))
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1


def test_bad_options(run_cli, tmp_path) -> None:
    root = fixtures.make_store(tmp_path)
    assert run_cli("report", str(root), "--format", "html").code == 2
    assert run_cli("report", str(root), "--suite", "other").code == 2
    assert run_cli("replay", str(root), "--variant", "ghost").code == 2
    for bad in (("--failure", "spike"), ("--failure", "logit-runaway", "--logit-limit", "0")):
        result = run_cli("report", str(root), *bad)
        assert result.code == 2 and len(result.err.strip().splitlines()) == 1
        assert "failure." in result.err
    for alone in (
        ("--table", "metrics"),  # csv only
        ("--logit-limit", "5"),  # logit-runaway only
        ("--failure", "divergence", "--failure-layer", "0"),
        ("--wide", "--format", "json"),  # text tables only
        ("--wide", "--format", "csv"),
    ):
        result = run_cli("report", str(root), *alone)
        assert result.code == 2 and "applies to --" in result.err, alone
    result = run_cli("report", str(root), "--horizon", "0")
    assert result.code == 2 and "--horizon must be a step count >= 1" in result.err
    for flag in ("--baseline", "--safe"):  # '' would fall back to the default silently
        result = run_cli("report", str(root), flag, "")
        assert result.code == 2 and f"{flag} is empty: name a variant" in result.err
    layer = run_cli("report", str(root), "--failure", "logit-runaway", "--failure-layer", "-1")
    assert layer.code == 2 and "failure.layers must be layer indices >= 0, got -1\n" in layer.err


def test_replay_then_report(run_cli, tmp_path) -> None:
    root = fixtures.make_store(tmp_path)
    result = run_cli("replay", str(root), "--baseline", "baseline")
    assert result.code == 0, result.err
    assert "replayed" in result.out
    result = run_cli("report", str(root), "--format", "markdown")
    assert result.code == 0, result.err
    assert "## Ranking" in result.out and "delta-fp32" in result.out
    assert "## Pooled by switch value" in result.out
    assert "the replay ran on" not in result.out
    other = run_cli("report", str(root), "--baseline", "delta-fp32", "--format", "markdown")
    assert other.code == 0, other.err
    assert "the replay ran on baseline's captures, not on the baseline delta-fp32's" in other.out
    result = run_cli("report", str(root), "--format", "csv")
    assert result.out.startswith("suite,rank,variant")
    pooled = run_cli("report", str(root), "--format", "csv", "--table", "pooled")
    assert pooled.code == 0, pooled.err
    assert pooled.out.startswith("suite,switch,value,same_split,variants,failed,seeds")


def test_a_folder_where_replay_json_goes_is_one_line_exit_2(run_cli, tmp_path) -> None:
    root = fixtures.make_store(tmp_path)
    cell = sorted((root / "planted").glob("baseline--*"))[0]
    (cell / "replay.json").mkdir()
    result = run_cli("replay", str(root), "--baseline", "baseline")
    assert result.code == 2 and "Traceback" not in result.err  # after the progress lines:
    assert result.err.strip().splitlines()[-1] == (
        f"flashprobe: error: {cell / 'replay.json'} is a folder, not a file"
    )
    assert list((cell / "replay.json").iterdir()) == []
    assert not list(cell.glob(".replay.json.*"))  # no temporary file left


def test_plot_without_matplotlib(run_cli, tmp_path, monkeypatch) -> None:
    root = fixtures.make_store(tmp_path)
    real_import = builtins.__import__

    def no_mpl(name: str, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    result = run_cli("report", str(root), "--plot", str(tmp_path / "fig"))
    assert result.code == 2
    assert "pip install 'flashprobe[plot]'" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_plots_are_written(run_cli, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    root = fixtures.make_store(tmp_path)
    assert run_cli("replay", str(root)).code == 0
    result = run_cli("report", str(root), "--plot", str(tmp_path / "fig"))
    assert result.code == 0, result.err
    names = sorted(p.name for p in (tmp_path / "fig").glob("*.png"))
    assert "planted_loss.png" in names and "planted_delta_cumsum.png" in names


def test_plots_never_overwrite_a_figure_unless_forced(run_cli, tmp_path) -> None:
    """A figure of the same name already in the --plot folder: refused before anything is
    written (one line naming it, exit 2, no report printed); --force replaces the figures."""
    pytest.importorskip("matplotlib")
    root = fixtures.make_store(tmp_path)
    assert run_cli("replay", str(root)).code == 0
    fig = tmp_path / "fig"
    fig.mkdir()
    theirs = {"planted_delta_cumsum.png": b"theirs", "notes.png": b"notes"}  # written 2nd; other
    for name, blob in theirs.items():
        (fig / name).write_bytes(blob)
    result = run_cli("report", str(root), "--plot", str(fig))
    assert result.code == 2 and result.out == ""
    assert result.err == (
        f"flashprobe: error: {fig / 'planted_delta_cumsum.png'} exists; refusing to overwrite "
        "it (--force replaces it)\n"
    )
    assert {p.name: p.read_bytes() for p in fig.iterdir()} == theirs  # planted_loss.png unwritten
    result = run_cli("report", str(root), "--plot", str(fig), "--force")
    assert result.code == 0, result.err
    figures = sorted(p.name for p in fig.glob("planted_*.png"))
    assert result.err.count("wrote ") == len(figures) and "planted_loss.png" in figures
    assert (fig / "planted_delta_cumsum.png").read_bytes()[:4] == b"\x89PNG"
    for name in figures:
        (fig / name).write_bytes(b"old")
    result = run_cli("report", str(root), "--plot", str(fig))
    assert result.code == 2 and f"{fig / 'planted_loss.png'} exists" in result.err
    assert {(fig / name).read_bytes() for name in figures} == {b"old"}
    assert (fig / "notes.png").read_bytes() == b"notes"
    result = run_cli("report", str(root), "--force")
    assert result.code == 2 and result.err == "flashprobe: error: --force applies to --plot only\n"


def test_smoke_suite_ablate_then_report(run_cli, tmp_path) -> None:
    store = str(tmp_path / "runs")
    result = run_cli("ablate", "--config", str(SMOKE), "--store", store)
    assert result.code == 0, result.err
    assert "replay: 5 variants on the captures of 2 fa2 cells (2 replayed)" in result.out
    result = run_cli("replay", store)
    assert result.code == 0, result.err
    assert result.out.count(" cached ") == 2  # ablate replayed already
    result = run_cli("report", store)
    assert result.code == 0, result.err
    assert "Ranking" in result.out and "untiled" in result.out
    assert "dW columns: dW = dQᵀX." in result.out  # the captures hold the layer input X
    assert "no layer input X" not in result.out
    assert "set replay.baseline" not in result.out  # declared in suite.json, not inferred
    assert "key_shift_leak" in run_cli("report", store, "--format", "csv", "--table", "metrics").out
    summary = json.loads(run_cli("report", store, "--format", "json").out)[0]["summary"]
    for row in summary:  # every variant trained with attention stats every 10 steps
        assert row["peak_logit"] > 0 and 0 < row["median_leak"] < 1
    metrics = next((tmp_path / "runs" / "smoke").glob("fa2--*")) / "run" / "metrics.jsonl"
    stats = [json.loads(line)["attention"] for line in metrics.read_text().splitlines()
             if "attention" in line]  # fmt: skip
    assert stats and all(0 < v < 1 for s in stats for v in s["1"]["key_shift_leak"])
    if importlib.util.find_spec("matplotlib") is not None:
        assert run_cli("report", store, "--plot", str(tmp_path / "fig")).code == 0
        assert (tmp_path / "fig" / "smoke_logits.png").is_file()


def test_report_takes_the_roles_from_suite_json(run_cli, tmp_path) -> None:
    import json

    root = fixtures.make_store(tmp_path)
    assert run_cli("replay", str(root)).code == 0  # infers: baseline by name, no safe variant
    assert not (root / "planted" / "suite.json").exists()
    suite_file = root / "planted" / "suite.json"

    def roles(*args: str) -> dict:
        result = run_cli("report", str(root), "--format", "json", *args)
        assert result.code == 0, result.err
        return json.loads(result.out)[0]["roles"]

    replayed = roles()  # the replay's roles (replay.json)
    assert replayed["baseline"] == "baseline" and replayed["safe"] is None

    raw = {**fixtures.SUITE, "replay": {"baseline": "block-m", "safe": "delta-fp32",
                                        "components": {"baseline": "all of it"}}}  # fmt: skip
    suite_file.write_text(json.dumps(raw))
    declared = roles()
    assert (declared["baseline"], declared["safe"]) == ("block-m", "delta-fp32")
    assert declared["components"] == {"baseline": "all of it"} and not declared["notes"]
    assert roles("--baseline", "baseline")["baseline"] == "baseline"  # the flag still wins

    suite_file.write_text(json.dumps({**fixtures.SUITE, "branch": {"from": "block-m", "step": 0}}))
    branched = roles()  # no replay: section: the baseline is branch.from
    assert branched["baseline"] == "block-m" and branched["safe"] is None
    assert not any("baseline:" in n for n in branched["notes"])

    suite_file.write_text(json.dumps({**fixtures.SUITE, "replay": {"baseline": "gone"}}))
    assert roles()["baseline"] == "baseline"  # a stale name falls back to the replay's roles
    suite_file.write_text("[1, 2]")
    result = run_cli("report", str(root))
    assert result.code == 2 and "corrupt suite definition" in result.err


def _failure_fixtures():
    """tests/attribution/test_failure.py as a module: its store with a branched cell."""
    spec = importlib.util.spec_from_file_location(
        "failure_fixtures", Path(__file__).parents[1] / "attribution" / "test_failure.py"
    )
    failure = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(failure)  # type: ignore[union-attr]
    return failure


def test_report_with_a_logit_runaway_rule(run_cli, tmp_path) -> None:
    failure = _failure_fixtures()
    root = failure.make_store(tmp_path, 30)
    args = ("--failure", "logit-runaway", "--logit-limit", "100", "--failure-layer", "1")
    result = run_cli("report", str(root), *args)
    assert result.code == 0, result.err
    assert "failed (ranking): the max attention logit of layer 1 went above 100" in result.out
    plain = run_cli("report", str(root))
    assert plain.code == 0 and "failed (ranking)" not in plain.out
    at_20 = run_cli("report", str(root), *args, "--horizon", "20", "--wide")  # before step 30
    assert at_20.code == 0, at_20.err
    assert (
        "went above 100 (or was not finite), or the run diverged first within its first 20 steps"
        in at_20.out
    )
    assert "1/1" not in at_20.out and "0/1" in at_20.out
    beyond = run_cli("report", str(root), "--failure", "logit-runaway", "--failure-layer", "9")
    assert beyond.code == 2 and "failure.layers: layer 9 out of range 0..1" in beyond.err


def test_report_with_a_gradient_runaway_rule(run_cli, tmp_path) -> None:
    failure = _failure_fixtures()
    root = failure.make_store(tmp_path, 30)
    (fa2,) = [c for c in sr.read_cells(root) if c.variant == "fa2"]
    rows = failure.norms(*[0.3] * 12, 40.0, start=20)
    (fa2.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain = run_cli("report", str(root), "--wide")
    assert plain.code == 0, plain.err
    assert "gradient norm ran away" in plain.out  # a note under the loss rule, no count
    result = run_cli("report", str(root), "--failure", "gradient-runaway", "--wide")
    assert result.code == 0, result.err
    assert "failed (ranking): the run's divergence rule fired, or its gradient norm" in result.out
    assert "gradient norm ran away" not in result.out  # now a failure, not a note
    limit = run_cli("report", str(root), "--failure", "gradient-runaway", "--logit-limit", "5")
    assert limit.code == 2 and "applies to --failure logit-runaway only" in limit.err


def test_report_fits_100_columns_unless_wide(run_cli, tmp_path) -> None:
    root = fixtures.make_store(tmp_path)
    assert run_cli("replay", str(root), "--baseline", "baseline").code == 0
    narrow = run_cli("report", str(root))
    wide = run_cli("report", str(root), "--wide")
    assert narrow.code == 0 and wide.code == 0, narrow.err + wide.err
    assert max(len(line) for line in narrow.out.splitlines()) <= 100
    assert max(len(line) for line in wide.out.splitlines()) > 100
    for word in ("Ranking", "K-shift leak", "P̄=1/row", "Fisher p", "verdict", "Method:"):
        assert word in narrow.out and word in wide.out


def test_plot_folder_that_cannot_be_written_exits_2_before_reading(run_cli, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    root = fixtures.make_store(tmp_path / "store")
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    for plot in (blocker, blocker / "figures"):
        result = run_cli("report", str(root), "--plot", str(plot))
        assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
        assert "--plot" in result.err and result.out == ""
    assert blocker.read_text() == "keep"


def test_report_lists_what_is_inconsistent_in_the_store(run_cli, tmp_path) -> None:
    root = fixtures.make_store(tmp_path / "store")
    clean = run_cli("report", str(root))
    assert clean.code == 0, clean.err
    assert "store check" not in clean.out
    cells = sorted((root / "planted").glob("*--*"))
    metrics = cells[0] / "run" / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + metrics.read_text().splitlines()[-1] + "\n")
    summary = json.loads((cells[1] / "summary.json").read_text())
    (cells[1] / "summary.json").write_text(json.dumps({**summary, "final_loss": "NaN"}))
    result = run_cli("report", str(root))
    assert result.code == 0, result.err
    notes = result.out.split("Notes\n-----\n")[1]
    assert f"store check: {cells[0].name}: run/metrics.jsonl: 1 step logged twice (3)" in notes
    assert f"store check: {cells[1].name}: summary.json final_loss is str 'NaN'" in notes
    document = json.loads(run_cli("report", str(root), "--format", "json").out)
    assert sum("store check" in n for n in document[0]["notes"]) == 2


def test_replay_of_captures_that_do_not_fit_their_config_is_one_line(run_cli, tmp_path) -> None:
    root = fixtures.make_store(tmp_path / "store")
    cell = sorted((root / "planted").glob("baseline--*"))[0]
    config = json.loads((cell / "config.json").read_text())
    config["model"]["n_head"] = 8  # the captures hold 2 heads
    (cell / "config.json").write_text(json.dumps(config))
    result = run_cli("replay", str(root), "--baseline", "baseline")
    assert result.code == 1
    (last,) = [line for line in result.err.splitlines() if line.startswith("flashprobe:")]
    assert last.startswith("flashprobe: replay of suite planted failed: RuntimeError: ")
    assert "Traceback" not in result.err
