"""`flashprobe replay --variants-from`: a store that trained only its baseline replays another
suite's variants on the baseline's captures exactly as a store that trained them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from tiny_suite import tiny_suite

TINY: dict[str, Any] = tiny_suite(
    {
        "base": {
            "train": {"steps": 6, "checkpoint_every": 3},
            "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 0},
            "kernel": {"preset": "paper-code"},
            "capture": {"layers": [0, 1], "steps": [2, 4], "max_bytes": 1_000_000},
        },
        "variants": {"paper-code": {}},
        "replay": {"baseline": "paper-code", "backend": "emulator"},
    }
)
#: One switch at a time, as ablations/adamw-attribution.yaml: inherits the regime, no captures.
OTHER = {
    "inherit": "tiny.yaml",
    "base": {"capture": None},
    "variants": {
        "paper-code": {},
        "fa2": {"kernel": {"preset": "fa2"}},
        "score-fp32": {"kernel": {"score_precision": "fp32"}},
        "acc-fp32": {"kernel": {"accumulator": "fp32"}},
        "delta-dp-p": {"kernel": {"delta_source": "dp_p", "delta_precision": "fp32"}},
        "tiles-16": {"kernel": {"block_m": 16, "block_n": 16}},  # two tiles of 32 tokens
    },
}


def write(folder: Path, name: str, raw: dict[str, Any]) -> str:
    path = folder / name
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def one_line_error(result, *needles: str) -> None:
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flashprobe: error: "), result.err
    for needle in needles:
        assert needle in lines[0], lines[0]


def baseline_doc(store: Path) -> dict[str, Any]:
    (cell,) = (store / "tiny").glob("paper-code--*")
    return json.loads((cell / "replay.json").read_text())


@pytest.fixture
def baseline_store(tmp_path, run_cli) -> Path:
    """tiny.yaml with its baseline trained (captures at steps 2 and 4 of layers 0 and 1)."""
    config, store = write(tmp_path, "tiny.yaml", TINY), tmp_path / "only"
    result = run_cli("ablate", "-c", config, "--store", str(store), "--no-replay")
    assert result.code == 0, result.err
    return store


def test_variants_from_replays_as_a_store_that_trained_them(
    tmp_path, run_cli, baseline_store
) -> None:
    other = write(tmp_path, "other.yaml", OTHER)
    # The same store with the other suite's variants trained too: the baseline cell is cached,
    # so both stores replay the very same captures.
    trained = tmp_path / "trained"
    shutil.copytree(baseline_store, trained)
    every = {**TINY, "variants": OTHER["variants"]}
    result = run_cli("ablate", "-c", write(tmp_path, "every.yaml", every), "--store", str(trained))
    assert result.code == 0, result.err
    assert "6 cells (5 run, 1 cached)" in result.out

    result = run_cli("replay", str(baseline_store), "--suite", "tiny", "--variants-from", other)
    assert result.code == 0, result.err
    assert "replayed" in result.out
    assert "note: tiny: 5 variant(s) replayed without training" in result.err
    mine, theirs = baseline_doc(baseline_store), baseline_doc(trained)
    assert {r["variant"] for r in mine["records"]} == set(OTHER["variants"])
    assert len(mine["records"]) == 6 * 2 * 2 * 2  # variants × steps × layers × heads
    assert mine["records"] == theirs["records"] and mine["series"] == theirs["series"]
    assert all(r["matches_capture"] for r in mine["records"] if r["variant"] == "paper-code")

    again = run_cli("replay", str(baseline_store), "--suite", "tiny", "--variants-from", other)
    assert again.code == 0 and " cached " in again.out
    report = run_cli("report", str(baseline_store), "--format", "json")
    assert report.code == 0, report.err
    (suite,) = json.loads(report.out)
    assert {m["variant"] for m in suite["metrics"]} == set(OTHER["variants"])
    assert [r["variant"] for r in suite["ranking"]] == ["paper-code"]  # no training outcomes

    # --variant filters by name across both suites; the others' earlier replay is kept
    one = run_cli("replay", str(baseline_store), "--variants-from", other, "--variant", "fa2")
    assert one.code == 0, one.err
    assert "replaying 1 variants on" in one.err
    assert {r["variant"] for r in baseline_doc(baseline_store)["records"]} == set(OTHER["variants"])


@pytest.mark.parametrize(
    "name", ["adamw-attribution.yaml", "adamw-attribution", "ablations/adamw-attribution.yaml"]
)
def test_a_bundled_suite_that_does_not_fit_is_one_line(
    tmp_path, run_cli, baseline_store, monkeypatch, name: str
) -> None:
    """The bundled GPT-2 124M attribution suite, named as `ablate -c` takes it (from a folder
    with no ablations/ in it), against 2-layer captures."""
    monkeypatch.chdir(tmp_path)
    result = run_cli("replay", str(baseline_store), "--suite", "tiny", "--variants-from", name)
    one_line_error(
        result,
        "suite tiny: variant 'acc-fp32' of ",
        "does not fit the captures of paper-code--",
        "n_layer 12 vs 2, n_head 12 vs 2, head dim 64 vs 16 (variant vs captures)",
    )
    assert not (baseline_store / "tiny" / "replay.json").exists()


def test_bad_variants_from_files_are_one_line(tmp_path, run_cli, baseline_store) -> None:
    store = str(baseline_store)
    one_line_error(
        run_cli("replay", store, "--variants-from", str(tmp_path / "none.yaml")),
        "--variants-from ",
        "suite file not found",
    )
    bad = write(tmp_path, "bad.yaml", {**OTHER, "variants": {"x": {"kernel": {"acc": "fp8"}}}})
    one_line_error(run_cli("replay", store, "--variants-from", bad), f"--variants-from {bad}: ")
    clash_raw = {**OTHER, "variants": {"paper-code": {"kernel": {"preset": "fa2"}}}}
    clash = write(tmp_path, "clash.yaml", clash_raw)
    one_line_error(
        run_cli("replay", store, "--variants-from", clash),
        "variant 'paper-code' of ",
        "runs other kernels than the trained 'paper-code' (layer 0: ",
    )


def test_a_listed_capture_that_is_gone_is_exit_2_and_nothing_rewritten(run_cli, tmp_path) -> None:
    """`replay --force` with one capture file deleted: it used to exit 0 with a note and rewrite
    the suite's replay.json from the other baseline cell alone."""
    store = tmp_path / "store"
    config = write(tmp_path, "tiny.yaml", {**TINY, "seeds": [0, 1]})
    assert run_cli("ablate", "-c", config, "--store", str(store)).code == 0
    written = {p: p.read_bytes() for p in store.rglob("replay.json")}
    assert len(written) == 3  # the suite's and its two cells'
    gone = sorted(store.glob("*/paper-code--*/run/captures/*.safetensors"))[0]
    gone.unlink()
    result = run_cli("replay", str(store), "--force")
    one_line_error(result, f"missing capture file {gone}: {gone.parent / 'manifest.json'} lists")
    assert {p: p.read_bytes() for p in store.rglob("replay.json")} == written
