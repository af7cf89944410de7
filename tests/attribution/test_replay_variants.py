"""Replaying variants that were never trained: another suite file's, or the ones suite.json
declares; shape checks, name collisions, grid points and the cache key."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from safetensors.torch import load_file, save_file

from flashprobe.attribution.replay import replay_store, replay_suites
from flashprobe.attribution.replay_settings import ReplaySettings
from flashprobe.errors import FlashprobeError
from flashprobe.store import reader as sr
from flashprobe.store.capture_reader import capture_files, read_capture_header
from flashprobe.store.replay_results import read_replay
from flashprobe.suites.bundled import bundled_suites
from flashprobe.yaml_io import read_yaml

# The synthetic store builder lives with the replay tests (test dirs are not packages).
_spec = importlib.util.spec_from_file_location(
    "replay_fixtures", Path(__file__).parent / "test_replay.py"
)
fixtures = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fixtures)  # type: ignore[union-attr]

SUITE: dict[str, Any] = fixtures.SUITE
BASELINE = ReplaySettings(baseline="baseline")


def suite_with(variants: dict[str, Any] | None = None, **model: Any) -> dict[str, Any]:
    raw = copy.deepcopy(SUITE)
    if variants is not None:
        raw["variants"] = variants
    raw["base"]["model"].update(model)
    return raw


def write_suite(folder: Path, raw: dict[str, Any], name: str = "other.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump({**raw, "name": path.stem}))
    return path


def baseline_only(root: Path) -> Path:
    """The planted suite with only its baseline trained (the same captures as make_store's)."""
    return fixtures.make_store(root, suite=suite_with({"baseline": {}}))


def cell_docs(root: Path) -> dict[int, dict[str, Any]]:
    """Per seed, the baseline cell's replay.json."""
    cells = [c for c in sr.read_cells(root, "planted") if c.variant == "baseline"]
    return {c.seed: read_replay(c) for c in cells}  # type: ignore[misc]


def suite_doc(root: Path) -> dict[str, Any]:
    return json.loads((root / "planted" / "replay.json").read_text())


def test_another_suites_variants_replay_bit_for_bit_as_if_trained(tmp_path) -> None:
    trained = fixtures.make_store(tmp_path / "trained")
    only = baseline_only(tmp_path / "only")
    other = write_suite(tmp_path, SUITE)
    replay_store(trained, "planted", settings=BASELINE)
    outcome = replay_store(only, "planted", settings=BASELINE, variants_from=other)

    assert [c["status"] for c in outcome.cells] == ["replayed", "replayed"]
    expected, got = cell_docs(trained), cell_docs(only)
    for seed in (0, 1):
        variants = {r["variant"] for r in got[seed]["records"]}
        assert variants == {"baseline", "block-m", "delta-fp32"}
        assert got[seed]["records"] == expected[seed]["records"]  # floats compare bit for bit
        assert got[seed]["series"] == expected[seed]["series"]
    assert suite_doc(only)["summary"] == suite_doc(trained)["summary"]
    assert suite_doc(only)["untrained_variants"] == {
        "block-m": str(other),
        "delta-fp32": str(other),
    }
    assert suite_doc(trained)["untrained_variants"] == {}
    assert any("2 variant(s) replayed without training" in n for n in outcome.notes)


@pytest.mark.parametrize(
    ("model", "mismatch"),
    [
        ({"n_layer": 3}, "n_layer 3 vs 2"),
        ({"n_head": 4, "n_embd": 64}, "n_head 4 vs 2"),
        ({"n_embd": 64}, "head dim 32 vs 16"),
        ({"n_kv_head": 1}, "kv heads 1 vs 2"),
    ],
)
def test_a_variant_that_does_not_fit_the_captures_is_one_line_and_keeps_the_old_replay(
    tmp_path, model: dict[str, Any], mismatch: str
) -> None:
    root = baseline_only(tmp_path / "store")
    replay_store(root, "planted", settings=BASELINE)
    before = {p: p.read_bytes() for p in sorted(root.glob("planted/**/replay.json"))}
    other = write_suite(tmp_path, suite_with(**model))
    with pytest.raises(FlashprobeError) as err:
        list(replay_suites(root, variants_from=other, baseline="baseline"))
    message = str(err.value)
    assert "\n" not in message and message.startswith("suite planted: variant 'baseline' of ")
    assert "does not fit the captures of baseline--" in message
    assert message.endswith("(variant vs captures)") and mismatch in message
    assert before == {p: p.read_bytes() for p in sorted(root.glob("planted/**/replay.json"))}


def test_a_misfit_on_any_source_stops_before_anything_is_written(tmp_path) -> None:
    """The second source's captures have head dim 8: the check of both sources comes before the
    first one's replay, so no replay.json is written."""
    from flashprobe.attribution.selection import one_run_per_seed

    root = baseline_only(tmp_path / "store")
    first, second = one_run_per_seed(sr.read_cells(root, "planted"))[0]  # the replay's order
    for _, path in capture_files(second):
        tensors = {k: t[..., :8].contiguous() for k, t in load_file(str(path)).items()}
        save_file(tensors, str(path), metadata=read_capture_header(0, path).metadata)
    other = write_suite(tmp_path, suite_with({"sfa": {"kernel": {"preset": "sfa"}}}))
    with pytest.raises(FlashprobeError, match=rf"captures of {second.name}: head dim 16 vs 8"):
        replay_store(root, "planted", settings=BASELINE, variants_from=other)
    assert not list(root.glob("planted/**/replay.json"))
    replay_store(root, "planted", settings=BASELINE)  # the trained baseline alone: both replay
    assert read_replay(first) is not None and read_replay(second) is not None


def test_non_causal_captures_do_not_fit_a_variant(tmp_path) -> None:
    root = baseline_only(tmp_path / "store")
    for cell in sr.read_cells(root, "planted"):
        for _, path in capture_files(cell):
            header = read_capture_header(0, path)
            save_file(
                load_file(str(path)), str(path), metadata={**header.metadata, "causal": "false"}
            )
    other = write_suite(tmp_path, suite_with({"sfa": {"kernel": {"preset": "sfa"}}}))
    with pytest.raises(FlashprobeError, match=r"variant 'sfa' of .*: causal true vs false"):
        replay_store(root, "planted", settings=BASELINE, variants_from=other)


def test_a_name_in_both_suites_must_mean_the_same_kernels(tmp_path) -> None:
    root = fixtures.make_store(tmp_path / "store")
    clash = write_suite(
        tmp_path, suite_with({"block-m": {"kernel": {"block_m": 16}}}), "clash.yaml"
    )
    with pytest.raises(FlashprobeError) as err:
        replay_store(root, "planted", settings=BASELINE, variants_from=clash)
    assert str(err.value) == (
        f"variant 'block-m' of {clash} runs other kernels than the trained 'block-m' "
        "(layer 0: block_m=16 vs 32); rename it in a copy of the file"
    )
    assert not (root / "planted" / "replay.json").exists()
    # --variant leaves the clash out
    named = ReplaySettings(baseline="baseline", variants=("baseline", "delta-fp32"))
    replay_store(root, "planted", settings=named, variants_from=clash)
    # the same kernels under the same name (other settings may differ): one variant, the trained
    same = {"block-m": {"kernel": {"block_m": 32}, "optimizer": {"lr": 1.0e-4}}}
    replay_store(root, "planted", settings=BASELINE, force=True)
    alone = cell_docs(root)
    outcome = replay_store(
        root, "planted", settings=BASELINE, variants_from=write_suite(tmp_path, suite_with(same))
    )
    assert [c["status"] for c in outcome.cells] == ["cached", "cached"]  # nothing new to replay
    assert suite_doc(root)["variants"] == ["baseline", "block-m", "delta-fp32"]
    assert suite_doc(root)["untrained_variants"] == {}
    assert cell_docs(root) == alone


def test_the_cache_key_follows_the_variant_set_and_specs(tmp_path) -> None:
    root = baseline_only(tmp_path / "store")
    raw = suite_with({"baseline": {}, "delta-fp32": {"kernel": {"delta_source": "o_fp32"}}})
    other = write_suite(tmp_path, raw)

    def replay(variants_from: Path | None) -> tuple[list[str], list[str]]:
        outcome = replay_store(root, "planted", settings=BASELINE, variants_from=variants_from)
        keys = [d["key"] for d in cell_docs(root).values()]
        return [c["status"] for c in outcome.cells], keys

    first, keys = replay(other)
    assert first == ["replayed", "replayed"]
    assert replay(other) == (["cached", "cached"], keys)
    raw["variants"]["delta-fp32"]["kernel"]["delta_source"] = "o_recompute"  # same name
    other.write_text(yaml.safe_dump({**raw, "name": "other"}))
    changed, changed_keys = replay(other)
    assert changed == ["replayed", "replayed"] and set(changed_keys).isdisjoint(keys)
    without, plain_keys = replay(None)
    assert without == ["replayed", "replayed"] and set(plain_keys).isdisjoint(changed_keys)
    # the untrained variant's earlier replay is kept beside the new one
    replayed = {r["variant"] for d in cell_docs(root).values() for r in d["records"]}
    assert replayed == {"baseline", "delta-fp32"}
    raw["variants"] = {"baseline": {}, "renamed": raw["variants"]["delta-fp32"]}  # same spec
    other.write_text(yaml.safe_dump({**raw, "name": "other"}))
    renamed, renamed_keys = replay(other)
    assert renamed == ["replayed", "replayed"] and set(renamed_keys).isdisjoint(changed_keys)


def test_a_variant_suite_json_declares_but_never_trained_replays_when_named(tmp_path) -> None:
    trained = fixtures.make_store(tmp_path / "trained")
    only = baseline_only(tmp_path / "only")
    named = ReplaySettings(baseline="baseline", variants=("baseline", "delta-fp32"))
    with pytest.raises(FlashprobeError, match=r"^replay: no variant 'delta-fp32' in suite"):
        replay_store(only, "planted", settings=named)
    (only / "planted" / "suite.json").write_text(json.dumps(SUITE))

    replay_store(trained, "planted", settings=named)
    outcome = replay_store(only, "planted", settings=named)
    for seed in (0, 1):
        assert cell_docs(only)[seed]["records"] == cell_docs(trained)[seed]["records"]
    origin = str(only / "planted" / "suite.json")
    assert suite_doc(only)["untrained_variants"] == {"delta-fp32": origin}
    assert any(f"delta-fp32 ({origin})" in n for n in outcome.notes)
    # unnamed, a declared variant is not replayed (the default is what was trained); its
    # earlier replay is kept
    said: list[str] = []
    replay_store(only, "planted", settings=BASELINE, force=True, progress=said.append)
    assert said[0].startswith("replaying 1 variants on")
    assert suite_doc(only)["variants"] == ["baseline", "delta-fp32"]
    assert suite_doc(only)["untrained_variants"] == {"delta-fp32": origin}


def test_grid_points_pick_the_sources_point_or_the_kernels_all_points_share(tmp_path) -> None:
    root = baseline_only(tmp_path / "store")
    by_lr = {**suite_with(), "axes": {"optimizer.lr": [1.0e-3, 2.0e-3]}}
    replay_store(root, "planted", settings=BASELINE, variants_from=write_suite(tmp_path, by_lr))
    assert suite_doc(root)["variants"] == ["baseline", "block-m", "delta-fp32"]
    by_kernel = {**suite_with(), "axes": {"kernel.block_n": [32, 16]}}
    with pytest.raises(
        FlashprobeError, match=r"has no run at the grid point \(none\) and its kernels"
    ):
        replay_store(
            root, "planted", settings=BASELINE, variants_from=write_suite(tmp_path, by_kernel)
        )


def test_variants_from_needs_one_suite(tmp_path) -> None:
    root = fixtures.make_store(tmp_path / "store")
    fixtures.make_store(root, suite={**SUITE, "name": "second"})
    other = write_suite(tmp_path, SUITE)
    with pytest.raises(FlashprobeError, match=r"name the suite .* \(suites here: planted, second"):
        list(replay_suites(root, variants_from=other, baseline="baseline"))
    ((name, _),) = replay_suites(root, "planted", variants_from=other, baseline="baseline")
    assert name == "planted"


def test_the_bundled_attribution_variants_replay_on_quick_shaped_captures(tmp_path) -> None:
    """`--variants-from adamw-attribution.yaml` on a quick store that trained only paper-code:
    the baseline (the same kernels in both suites) and its 20 other variants resolve and fit
    captures of the GPT-2 124M shape (12 layers, 12 heads of 64; 8 tokens here, so the emulator
    is quick)."""
    import torch

    from flashprobe.attribution.replay_variants import suite_file_variants
    from flashprobe.store.result_store import ResultStore
    from flashprobe.suites.cell_config import resolve_cell_config
    from flashprobe.suites.suite import load_suite

    quick = load_suite("quick.yaml", validate=lambda c: resolve_cell_config(c).to_dict())
    (cell,) = [c for c in quick.cells if c.variant == "paper-code"]
    store = ResultStore(tmp_path)
    path = store.open_cell(cell, "test", {"device": "cpu"})
    (path / "run" / "captures").mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    tensors = {
        f"layer{layer}.{name}": torch.randn(1, 12, 8, 64, generator=g).bfloat16()
        for layer in (0, 1)
        for name in ("q", "k", "v", "do")
    }
    meta = {"causal": "true", "softmax_scale": repr(0.125)}
    save_file(tensors, str(path / "run" / "captures" / "step_0000900.safetensors"), metadata=meta)
    store.finish(path, {"diverged": True, "diverged_step": 1400, "steps_done": 1400})

    attribution = suite_file_variants("adamw-attribution.yaml")
    declared = read_yaml(bundled_suites()["adamw-attribution"], "suite")["variants"]
    assert set(attribution) == set(declared)  # every variant of the suite file, none dropped
    ((_, outcome),) = replay_suites(
        tmp_path, "quick", variants_from="adamw-attribution", baseline="paper-code",
        backend="emulator",
    )  # fmt: skip
    assert [c["status"] for c in outcome.cells] == ["replayed"]
    doc = json.loads((tmp_path / "quick" / "replay.json").read_text())
    assert doc["variants"] == sorted(attribution)
    assert len(doc["untrained_variants"]) == len(declared) - 1
    assert "paper-code" not in doc["untrained_variants"]
    (source,) = sr.read_cells(tmp_path, "quick")
    records = read_replay(source)["records"]  # type: ignore[index]
    assert len(records) == len(declared) * 2 * 12  # variants × layers × heads (one step)
