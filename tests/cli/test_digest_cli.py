"""`flashprobe digest` and `flashprobe digest-report`: a store trained by `flashprobe ablate`
on the CPU, digested and reported; bad input is one line and exit code 2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SUITE = """\
name: cli-digest
seeds: [0]
base:
  model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32,
          attention: {impl: flashprobe, backend: emulator}}
  data: {source: stdlib, max_bytes: 100000}
  train: {steps: 20, batch_size: 4, device: cpu}
  metrics: {log_every: 10, eval_every: 0, spectral_every: 10, attention_stats_every: 10}
  kernel: {preset: fa2, block_n: 16}
variants:
  fa2: {}
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from flashprobe.cli import main

    root = tmp_path_factory.mktemp("cli-digest")
    suite = root / "suite.yaml"
    suite.write_text(SUITE)
    with pytest.raises(SystemExit) as done:
        main(["ablate", "--config", str(suite), "--store", str(root / "runs"), "--no-replay"])
    assert done.value.code == 0
    return root / "runs"


def test_digest_then_report(run_cli, store: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    result = run_cli("digest", str(store), str(out))
    assert result.code == 0, result.err
    assert "1 cells" in result.out
    cell = json.loads(out.read_text())["cells"][0]
    assert [row[0] for row in cell["loss"]] == [9, 19]
    result = run_cli("digest-report", str(out), "--reference", "fa2")
    assert result.code == 0, result.err
    assert "# Suite cli-digest" in result.out and "| fa2 " in result.out
    data = json.loads(run_cli("digest-report", str(out), "--format", "json").out)
    assert data[0]["outcomes"][0]["not_diverged_reached"] == {"0": 20}
    if importlib.util.find_spec("matplotlib") is not None:
        figs = tmp_path / "figs"
        result = run_cli("digest-report", str(out), "--plot", str(figs), "--cell", "fa2:0")
        assert result.code == 0, result.err
        assert (figs / "cli-digest_fa2_seed0_spectral_norm.png").is_file()
        assert (figs / "cli-digest_outcomes.png").is_file()
        assert result.err.count("wrote ") == 7


def test_digest_bad_input(run_cli, store: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    out.write_text("keep me")
    for args, message in [
        (("digest", str(tmp_path / "absent"), str(tmp_path / "x.json")), "not found"),
        (("digest", str(store), str(out)), "refusing to overwrite"),
        (("digest", str(store), str(tmp_path / "x.json"), "--every", "0"), "--every"),
        (("digest", str(store), str(tmp_path / "x.json"), "--suite", "no"), "no suite 'no'"),
    ]:
        result = run_cli(*args)
        assert result.code == 2, args
        assert result.err.startswith("flashprobe: error:") and message in result.err
        assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert out.read_text() == "keep me"
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("pointer", [b"", b"\xff\xfe garbage"])
def test_digest_of_a_store_with_a_damaged_latest_pointer(
    run_cli, store: Path, tmp_path: Path, pointer: bytes
) -> None:
    """A `checkpoints/latest` that names no checkpoint is no checkpoint, not a traceback."""
    import shutil

    copy = tmp_path / "runs"
    shutil.copytree(store, copy)
    (latest,) = copy.glob("*/*/run/checkpoints/latest")
    latest.write_bytes(pointer)
    out = tmp_path / "d.json"
    result = run_cli("digest", str(copy), str(out))
    assert result.code == 0, result.err
    assert json.loads(out.read_text())["cells"][0]["checkpoint_step"] is None


def test_digest_report_plots_never_overwrite_a_figure_unless_forced(
    run_cli, store: Path, tmp_path: Path
) -> None:
    """A figure of the same name already in the --plot folder: refused before anything is
    written (one line naming it, exit 2, no report printed); --force replaces the figures."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "d.json"
    assert run_cli("digest", str(store), str(out)).code == 0
    figs = tmp_path / "figs"
    figs.mkdir()
    late = figs / "cli-digest_fa2_seed0_spectral_norm.png"  # a per-run figure: written late
    late.write_bytes(b"theirs")
    args = ("digest-report", str(out), "--cell", "fa2:0", "--plot", str(figs))
    result = run_cli(*args)
    assert result.code == 2 and result.out == ""
    assert result.err == (
        f"flashprobe: error: {late} exists; refusing to overwrite it (--force replaces it)\n"
    )
    assert [p.name for p in figs.iterdir()] == [late.name] and late.read_bytes() == b"theirs"
    result = run_cli(*args, "--force")
    assert result.code == 0, result.err
    assert result.err.count("wrote ") == 7 and late.read_bytes()[:4] == b"\x89PNG"
    result = run_cli(*args)
    assert result.code == 2 and f"{figs / 'cli-digest_loss_grad_norm.png'} exists" in result.err
    result = run_cli("digest-report", str(out), "--force")
    assert result.code == 2 and result.err == "flashprobe: error: --force applies to --plot only\n"


def test_digest_report_bad_input(run_cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"cells": []}')
    good = tmp_path / "good.json"
    good.write_text(json.dumps([{"meta": {"suite": "q", "variant": "a", "seed": 0}}]))
    plot_file = tmp_path / "a-file"
    plot_file.write_text("")
    for args, message in [
        ((str(tmp_path / "absent.json"),), "digest not found"),
        ((str(bad),), "digest is not JSON"),
        ((str(wrong),), "not a flashprobe digest"),
        ((str(good), "--format", "csv"), "--format"),
        ((str(good), "--horizon", "0"), "--horizon"),
        ((str(good), "--reference", "b"), "no variant 'b'"),
        ((str(good), "--safe", "b"), "no variant 'b' (--safe)"),
        ((str(good), "--cell", "a"), "VARIANT:SEED"),
        ((str(good), "--rise-factor", "0.5"), "--rise-factor"),
        ((str(good), "--suite", "z"), "no suite 'z'"),
        ((str(good), "--plot", str(plot_file)), "is not a folder"),
        ((str(good), "--plot", str(plot_file / "figs")), "is not a folder"),
        ((), "Missing argument"),
    ]:
        result = run_cli("digest-report", *args)
        assert result.code == 2, args
        assert result.err.startswith("flashprobe: error:") and message in result.err, result.err
        assert result.err.count("\n") == 1 and "Traceback" not in result.err
        assert result.out == ""  # refused before the report is built
    assert run_cli("digest-report", str(good)).code == 0


def test_digest_merge(run_cli, store: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for out in (first, second):  # the same store twice: the same runs
        assert run_cli("digest", str(store), str(out)).code == 0
    result = run_cli("digest-merge", str(first), str(first), str(second))
    assert result.code == 2 and "refusing to overwrite" in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    result = run_cli("digest-merge", str(first), str(first), str(second), "--force")
    assert result.code == 0, result.err
    assert "1 runs" in result.out and "1 superseded" in result.out
    assert "superseded: fa2 seed 0" in result.out
    assert len(json.loads(first.read_text())["cells"]) == 1
    result = run_cli("digest-merge", str(tmp_path / "m.json"), str(first), str(tmp_path / "no"))
    assert result.code == 2 and "digest not found" in result.err
    assert not (tmp_path / "m.json").exists()


def test_digest_merge_output_under_a_file_is_one_line(run_cli, store: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for out in (first, second):
        assert run_cli("digest", str(store), str(out)).code == 0
    blocker = tmp_path / "plain-file"
    blocker.write_text("")
    result = run_cli("digest-merge", str(blocker / "m.json"), str(first), str(second))
    assert result.code == 2, result.err
    assert "merge output" in result.err and "not a folder" in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err


def test_digest_of_a_torn_replay_is_exit_2_as_report_and_replay(run_cli, tmp_path: Path) -> None:
    """A truncated replay.json (the suite's or a cell's): report and replay exit 2; digest
    exited 0, embedding {"error": ...} in the cell (the suite's it did not read)."""
    kernel = "  kernel: {preset: fa2, block_n: 16}\n"
    config = tmp_path / "s.yaml"
    config.write_text(
        SUITE.replace(kernel, kernel + "  capture: {layers: [1], steps: [5]}\n")
        + "replay: {baseline: fa2, backend: emulator}\n"
    )
    store = tmp_path / "store"
    assert run_cli("ablate", "-c", str(config), "--store", str(store)).code == 0
    out = tmp_path / "d.json"
    (cell,) = store.glob("cli-digest/fa2--*")
    for torn in (store / "cli-digest" / "replay.json", cell / "replay.json"):
        whole = torn.read_text()
        torn.write_text(whole[: len(whole) // 2])
        for args in (("digest", str(store), str(out)), ("report", str(store))):
            result = run_cli(*args)
            assert result.code == 2, (args, result.err)
            assert result.err.count("\n") == 1 and str(torn) in result.err
        assert not out.exists()
        torn.write_text(whole)
    assert run_cli("digest", str(store), str(out)).code == 0


def test_digest_merge_of_digests_without_cells_is_exit_2(run_cli, tmp_path: Path) -> None:
    empty = {"format": "flashprobe-digest", "version": 3, "cells": [], "suites": {}}
    inputs = []
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(empty))
        inputs.append(str(tmp_path / name))
    result = run_cli("digest-merge", str(tmp_path / "m.json"), *inputs)
    assert result.code == 2 and result.err == "flashprobe: error: the digests hold no cells\n"
    assert not (tmp_path / "m.json").exists()
