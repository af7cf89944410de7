"""Replay on a synthetic store whose captures carry a planted, known error."""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from flashprobe.attribution.ranking import rank
from flashprobe.attribution.replay import replay_cells, replay_store, replay_suites
from flashprobe.attribution.replay_kernel import run_kernel
from flashprobe.attribution.replay_settings import ReplaySettings
from flashprobe.errors import FlashprobeError, RunStopped
from flashprobe.reference.emulator import emulate_forward
from flashprobe.store import reader as sr
from flashprobe.store.capture_reader import capture_files, load_capture
from flashprobe.store.replay_results import read_replay
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.cell_config import normalise_cell_config
from flashprobe.suites.suite import expand_suite

PLANTED = 1e-2  # added to δ by every variant whose δ comes from the bf16 O

SUITE = {
    "name": "planted",
    "seeds": [0, 1],
    "base": {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 64,
                  "attention": {"impl": "flashprobe", "backend": "emulator"}},
        "data": {"source": "stdlib", "max_bytes": 100000},
        "train": {"steps": 4, "batch_size": 2, "device": "cpu"},
        "kernel": {"preset": "fa2"},
        "capture": {"layers": [1], "steps": [1, 2, 3]},
    },
    "variants": {
        "baseline": {},
        "delta-fp32": {"kernel": {"delta_source": "o_fp32"}},
        "block-m": {"kernel": {"block_m": 32}},
    },
}  # fmt: skip
DIVERGED = {"baseline": [3, 3], "delta-fp32": [None, None], "block-m": [3, 2]}


def make_store(
    root: Path,
    *,
    with_x: bool = False,
    finished: bool = True,
    suite: dict | None = None,
    kv_heads: int | None = None,
    expand: bool = False,
    shape: tuple[int, int, int] = (2, 64, 16),
) -> Path:
    """A two-seed suite: every cell finished with DIVERGED outcomes, captures at steps 1-3 of
    layer 1 (fa2 forward on random bf16 tensors, so the baseline replay reproduces O).
    kv_heads: K, V with that many heads (grouped-query); expand: write them out per query head;
    shape: the captures' (batch, tokens, head_dim)."""
    store = ResultStore(root)
    suite = suite or SUITE
    heads = suite["base"]["model"]["n_head"]
    for cell in expand_suite(suite, validate=normalise_cell_config).cells:
        path = store.open_cell(cell, "test", {"device": "cpu"})
        folder = path / "run" / "captures"
        folder.mkdir(parents=True)
        for step in (1, 2, 3):
            g = torch.Generator().manual_seed(100 * cell.seed + step)
            batch, tokens, head_dim = shape
            q = torch.randn(batch, heads, tokens, head_dim, generator=g).bfloat16()
            k, v = (torch.randn(batch, kv_heads or heads, tokens, head_dim, generator=g).bfloat16()
                    for _ in range(2))  # fmt: skip
            do = torch.randn(batch, heads, tokens, head_dim, generator=g).bfloat16()
            if expand:
                own = [h // (heads // k.shape[1]) for h in range(heads)]
                k, v = k[:, own], v[:, own]
            fwd = emulate_forward(q, k, v, "fa2", causal=True)
            tensors = {"layer1.q": q, "layer1.k": k, "layer1.v": v, "layer1.o": fwd.o,
                       "layer1.do": do, "layer1.lse": fwd.lse}  # fmt: skip
            if with_x:
                tensors["layer1.x"] = torch.randn(batch, tokens, 32, generator=g)
            meta = {"step": str(step), "causal": "true", "softmax_scale": repr(0.25)}
            save_file(tensors, str(folder / f"step_{step:07d}.safetensors"), metadata=meta)
        (path / "run" / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "loss": 5.0 - s}) + "\n" for s in range(4))
        )
        step = DIVERGED.get(cell.variant, [None, None])[cell.seed]
        if finished or cell.variant != "block-m" or cell.seed == 0:
            store.finish(
                path, {"diverged": step is not None, "diverged_step": step, "steps_done": 4}
            )
    return root


def planted_kernel(*args: Any, **kwargs: Any) -> Any:
    run = run_kernel(*args, **kwargs)
    spec = args[4]
    if spec.delta_source == "o_lowp":
        return replace(run, delta=run.delta + PLANTED)
    return run


def test_planted_bias_ranks_first_and_inert_component_last(tmp_path) -> None:
    root = make_store(tmp_path)
    cells = sr.read_cells(root, "planted")
    outcome = replay_cells(cells, ReplaySettings(baseline="baseline"), kernel=planted_kernel)
    assert [c["status"] for c in outcome.cells] == ["replayed", "replayed"]
    doc = json.loads((root / "planted" / "replay.json").read_text())
    summary = doc["summary"]
    base, fixed = summary["baseline"], summary["delta-fp32"]
    assert base["matches_capture"] is True  # the emulator reproduces the captured O bit for bit
    assert base["delta_bias"] == pytest.approx(PLANTED, rel=0.05)
    assert fixed["delta_bias"] < 1e-2 * PLANTED  # what is left: unbiased rounding noise
    assert summary["block-m"]["delta_bias"] == base["delta_bias"]
    assert base["growth_exponent"] == pytest.approx(1.0, abs=0.02)
    assert fixed["growth_exponent"] < 0.8
    assert base["delta_coherence"] == pytest.approx(1.0)
    assert base["delta_t_max"] > 20
    assert doc["weight_gradient"].startswith("token-summed")  # no layer1.x in these captures
    # fp32 running ℓ everywhere: the backward's softmax sums to 1 up to fp32 rounding
    assert all(abs(s["softmax_sum_bias"]) < 1e-6 for s in summary.values()), summary

    table = rank(cells, outcome.roles, summary)
    ranked = [r["variant"] for r in table if r["rank"] is not None]
    assert ranked == ["delta-fp32", "block-m"]
    by = {r["variant"]: r for r in table}
    assert by["delta-fp32"]["mechanism_share"] == pytest.approx(1.0, abs=1e-2)
    assert by["block-m"]["mechanism_share"] == 0.0
    assert by["block-m"]["component"] == "block_m=32"


def test_unchanged_replay_is_cached_and_x_gives_weight_gradients(tmp_path) -> None:
    root = make_store(tmp_path, with_x=True)
    first = replay_store(root, "planted", settings=ReplaySettings(variants=("baseline",)))
    assert {c["status"] for c in first.cells} == {"replayed"}
    again = replay_store(root, "planted", settings=ReplaySettings(variants=("baseline",)))
    assert {c["status"] for c in again.cells} == {"cached"}
    cell = next(c for c in sr.read_cells(root) if c.variant == "baseline")
    doc = read_replay(cell)
    assert doc is not None and doc["weight_gradient"] == "dW = dQᵀX"
    rec = doc["records"][0]
    assert 0 < rec["wq_rel"] < 1 and 0 < rec["dq_rel"] < 1
    series = doc["series"][0]
    assert series["steps"] == [1, 2, 3]
    assert 0 < series["wq_coherence"] <= 1 and not math.isnan(series["wq_direction_similarity"])


def test_captures_gone_leave_the_earlier_suite_replay_alone(tmp_path) -> None:
    """Captures deleted after a replay (to free disk): a later replay has nothing to replay and
    keeps the suite's replay.json, whose summary `report` ranks with, instead of emptying it."""
    root = make_store(tmp_path)
    settings = ReplaySettings(baseline="baseline")
    replay_cells(sr.read_cells(root, "planted"), settings, kernel=planted_kernel)
    suite_file = root / "planted" / "replay.json"
    before = suite_file.read_bytes()
    assert json.loads(before)["summary"]
    for folder in root.glob("planted/*/run/captures"):
        shutil.rmtree(folder)
    for force in (False, True):
        outcome = replay_cells(sr.read_cells(root, "planted"), settings, force=force)
        assert [c["status"] for c in outcome.cells] == ["no captures", "no captures"]
        assert suite_file.read_bytes() == before
        assert any("kept" in note and str(suite_file) in note for note in outcome.notes)


def test_a_flag_one_suite_cannot_take_stops_before_any_suite_is_replayed(tmp_path) -> None:
    """`replay --baseline block-m` on a store whose second suite has no block-m: one error,
    and the first suite's cells and replay.json are left as they were (it used to replay and
    rewrite them first)."""
    root = make_store(tmp_path)
    make_store(root, suite={**SUITE, "name": "zzz", "variants": {"baseline": {}}})
    with pytest.raises(FlashprobeError, match="suite zzz: no baseline variant 'block-m'"):
        list(replay_suites(root, baseline="block-m"))
    assert list(root.glob("*/replay.json")) == list(root.glob("*/*/replay.json")) == []


def test_a_superseded_baseline_run_is_not_replayed(tmp_path) -> None:
    """A second run of a baseline seed (here a copy, started later) replaces the first."""
    root = make_store(tmp_path)
    first = next(c for c in sr.read_cells(root, "planted") if c.variant == "baseline")
    rerun = first.path.with_name(first.path.name + "-rerun")
    shutil.copytree(first.path, rerun)
    os.utime(rerun / "environment.json", (first.started + 10, first.started + 10))
    settings = ReplaySettings(baseline="baseline", variants=("baseline",))
    outcome = replay_cells(sr.read_cells(root, "planted"), settings, kernel=planted_kernel)
    replayed = [c["cell"] for c in outcome.cells]
    assert rerun.name in replayed and first.path.name not in replayed and len(replayed) == 2
    assert "1 superseded run(s) not replayed" in " ".join(outcome.notes)


def test_replay_suites_reads_each_suites_stored_settings(tmp_path) -> None:
    root = make_store(tmp_path)
    said: list[str] = []
    (name, outcome), *more = replay_suites(root, progress=said.append, baseline="baseline")
    assert name == "planted" and not more
    assert [c["status"] for c in outcome.cells] == ["replayed", "replayed"]
    assert said[0].startswith("replaying 3 variants on baseline--")
    # without flags: the roles the last replay resolved (replay.json), and nothing to redo
    ((_, again),) = replay_suites(root, "planted")
    assert again.roles.baseline == "baseline"
    assert [c["status"] for c in again.cells] == ["cached", "cached"]
    with pytest.raises(FlashprobeError, match=r"^suite planted: replay: no variant 'ghost'"):
        list(replay_suites(root, variants=("ghost",)))


def test_captures_that_do_not_fit_their_config_stop_the_replay(tmp_path) -> None:
    root = make_store(tmp_path)
    cell = sorted((root / "planted").glob("baseline--*"))[0]
    config = json.loads((cell / "config.json").read_text())
    config["model"]["n_head"] = 8  # the captures hold 2 heads
    (cell / "config.json").write_text(json.dumps(config))
    with pytest.raises(RunStopped, match=r"^replay of suite planted failed: RuntimeError: ") as err:
        list(replay_suites(root, baseline="baseline"))
    assert err.value.exit_code == 1


def test_x_gives_the_real_dw_per_head_group_and_the_report_drops_the_no_x_note(tmp_path) -> None:
    """A variant whose layer-1 heads run as two groups (head 1: block_m 32) gets a planted dQ
    error E on head 1 only: its dW_Q error is Eᵀ X for that head (head 1's B × T × D slice
    against the captured X), head 0 stays at rounding level, and head 1 matches the variant
    that runs both heads as one group."""
    from flashprobe.reference.golden import golden_backward
    from flashprobe.reporting.report import build_suite_report

    suite = json.loads(json.dumps(SUITE))
    suite["variants"] = {
        "baseline": {},
        "block-m": {"kernel": {"block_m": 32}},
        "split": {"model": {"layers": {1: {"heads": {1: {"spec": {"block_m": 32}}}}}}},
    }
    planted = torch.randn(2, 64, 16, generator=torch.Generator().manual_seed(7)).double()

    def kernel(*args: Any, **kwargs: Any) -> Any:
        run = run_kernel(*args, **kwargs)
        if args[4].block_m == 32:  # every head of the group gets dq += E
            return replace(run, dq=run.dq + planted.unsqueeze(1).to(run.dq.dtype))
        return run

    root = make_store(tmp_path, with_x=True, suite=suite)
    cells = sr.read_cells(root, "planted")
    replay_cells(cells, ReplaySettings(baseline="baseline"), kernel=kernel)
    source = next(c for c in cells if c.variant == "baseline" and c.seed == 0)
    doc = read_replay(source)
    assert doc is not None and doc["weight_gradient"] == "dW = dQᵀX"
    assert not any("layer input X" in n for n in doc["notes"])
    capture = load_capture(1, capture_files(source)[0][1])
    t = {n: capture.layer(1, n) for n in ("q", "k", "v", "do", "x")}
    gold = golden_backward(t["q"], t["k"], t["v"], t["do"], causal=True, scale=0.25)
    x = t["x"].double()
    rec = {(r["variant"], r["head"]): r for r in doc["records"] if r["step"] == 1}
    expected = float(
        torch.linalg.vector_norm(torch.einsum("btd,btc->dc", planted, x))
        / torch.linalg.vector_norm(torch.einsum("btd,btc->dc", gold.dq[:, 1], x))
    )
    assert rec["split", 1]["wq_rel"] == pytest.approx(expected, rel=0.02)
    assert rec["split", 1]["wq_rel"] == rec["block-m", 1]["wq_rel"]
    assert rec["split", 0]["wq_rel"] == rec["baseline", 0]["wq_rel"] < 0.05
    assert rec["split", 1]["wk_rel"] == rec["block-m", 1]["wk_rel"] < 0.05  # dK untouched

    report = build_suite_report("planted", sr.read_cells(root, "planted"))
    assert report.weight_gradient == "dW = dQᵀX"
    assert not any("layer input X" in n for n in report.notes)
    assert "layer input X" not in " ".join(report.missing)


def test_without_x_the_report_notes_the_token_summed_proxy(tmp_path) -> None:
    from flashprobe.reporting.report import build_suite_report

    root = make_store(tmp_path)
    replay_store(root, "planted", settings=ReplaySettings(variants=("baseline",)))
    report = build_suite_report("planted", sr.read_cells(root, "planted"))
    assert report.weight_gradient == "token-summed dQ (no X captured)"
    assert any("no layer input X" in n for n in report.notes)


def test_a_planted_common_key_gradient_shows_as_key_shift_leak(tmp_path) -> None:
    """dK += c for every key (a gradient softmax cannot have) is reported as the variant's
    key-shift leak, pointing against mean(q) when c does; the baseline stays at rounding level."""
    from flashprobe.reporting.report import build_suite_report
    from flashprobe.reporting.report_tables import render_reports

    def kernel(*args: Any, **kwargs: Any) -> Any:
        run = run_kernel(*args, **kwargs)
        if args[4].block_m == 32:
            q = args[0].double()
            offset = -q.mean(dim=-2, keepdim=True) * run.dk.double().abs().mean() / q.abs().mean()
            return replace(run, dk=(run.dk.double() + offset).to(run.dk.dtype))
        return run

    root = make_store(tmp_path)
    cells = sr.read_cells(root, "planted")
    replay_cells(cells, ReplaySettings(baseline="baseline"), kernel=kernel)
    summary = json.loads((root / "planted" / "replay.json").read_text())["summary"]
    assert summary["baseline"]["key_shift_leak"] < 0.02
    assert summary["block-m"]["key_shift_leak"] > 0.3
    assert summary["block-m"]["key_shift_drift"] > 0.9
    text = render_reports([build_suite_report("planted", cells)], "table", table="metrics")
    assert "K-shift leak" in text


def test_grouped_query_captures_replay_as_each_query_heads_copy_of_its_kv_head(tmp_path) -> None:
    """K, V captured with 2 heads for 4 query heads replay exactly as the same tensors written out
    per query head (query head h reads key/value head h // 2)."""
    suite = json.loads(json.dumps(SUITE))
    suite["base"]["model"].update(n_head=4, n_kv_head=2, n_embd=64)
    records = []
    for expand in (False, True):
        root = make_store(tmp_path / str(expand), suite=suite, kv_heads=2, expand=expand)
        replay_store(root, "planted", settings=ReplaySettings(variants=("baseline", "delta-fp32")))
        cell = next(c for c in sr.read_cells(root) if c.variant == "baseline" and c.seed == 0)
        doc = read_replay(cell)
        assert doc is not None
        records.append(doc["records"])
    grouped, expanded = records
    assert len(grouped) == 2 * 3 * 4  # variants × steps × query heads
    assert all(r["matches_capture"] for r in grouped if r["variant"] == "baseline")
    assert grouped == expanded


def test_the_same_store_replays_to_the_same_bits_at_any_thread_count(tmp_path) -> None:
    """One head over 1,024 tokens: the matmuls of the golden, the emulator and dW = dQᵀX split
    their sums between threads when there are fewer matrices than threads. The replay pins its
    thread count, so processes with 1 or 3 threads write byte-identical replay.json files
    (without the pin: o_mean ~1e-13, dk_rel ~1e-4, key_shift_drift ~1e-2 relative apart)."""
    suite = json.loads(json.dumps(SUITE))
    suite["seeds"] = [0]
    suite["base"]["model"].update(n_head=1, n_embd=32)
    root = make_store(tmp_path, with_x=True, suite=suite, shape=(1, 1024, 32))
    settings = ReplaySettings(baseline="baseline", variants=("baseline", "delta-fp32"))
    before = torch.get_num_threads()
    written = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            replay_store(root, "planted", settings=settings, force=True)
            assert torch.get_num_threads() == threads
            files = sorted(root.glob("planted/**/replay.json"))
            written.append({f.relative_to(root): f.read_bytes() for f in files})
    finally:
        torch.set_num_threads(before)
    assert len(written[0]) == 2  # the cell's and the suite's
    same = {str(name): written[0][name] == written[1].get(name) for name in written[0]}
    assert all(same.values()), same


def test_replaying_one_more_variant_adds_it_to_the_earlier_replay(tmp_path) -> None:
    """`replay --variant delta-fp32` (with or without --force) after a replay of the others:
    the variant replayed now replaces its own entries, the others' are kept (in the source
    cells' replay.json, which `report` and `digest` read, and in the suite's summary)."""
    root = make_store(tmp_path)
    cells = sr.read_cells(root, "planted")
    first = ReplaySettings(baseline="baseline", variants=("baseline", "block-m"))
    replay_cells(cells, first, kernel=planted_kernel)
    suite_file = root / "planted" / "replay.json"
    before = json.loads(suite_file.read_text())["summary"]
    for force in (False, True):
        more = replace(first, variants=("delta-fp32",))
        outcome = replay_cells(sr.read_cells(root, "planted"), more, force=force)
        doc = json.loads(suite_file.read_text())
        assert sorted(doc["summary"]) == ["baseline", "block-m", "delta-fp32"]
        assert sorted(doc["variants"]) == ["baseline", "block-m", "delta-fp32"]
        assert doc["summary"]["baseline"] == before["baseline"]
        assert doc["summary"]["delta-fp32"]["delta_bias"] < 1e-2 * PLANTED
        assert any("kept the earlier replay of baseline, block-m" in n for n in outcome.notes)
        for cell in sr.read_cells(root, "planted"):
            if cell.variant == "baseline":
                variants = {r["variant"] for r in read_replay(cell)["records"]}
                assert variants == {"baseline", "block-m", "delta-fp32"}


def test_a_restricted_replay_with_other_settings_refuses_unless_forced(tmp_path) -> None:
    """The earlier replay ran on other captures (here: another baseline's): adding one variant
    to it would pool two sets of captures in one summary; an error says how to proceed, and
    --force replaces it with a note."""
    root = make_store(tmp_path)
    cells = sr.read_cells(root, "planted")
    replay_cells(cells, ReplaySettings(baseline="block-m"), kernel=planted_kernel)
    suite_file = root / "planted" / "replay.json"
    before = suite_file.read_bytes()
    more = ReplaySettings(baseline="baseline", variants=("delta-fp32",))
    with pytest.raises(FlashprobeError, match=r"block-m's captures .*--force") as err:
        replay_cells(sr.read_cells(root, "planted"), more)
    assert "\n" not in str(err.value)
    assert suite_file.read_bytes() == before
    assert not list(root.glob("planted/baseline--*/replay.json"))
    outcome = replay_cells(sr.read_cells(root, "planted"), more, force=True)
    assert sorted(json.loads(suite_file.read_text())["summary"]) == ["delta-fp32"]
    assert any(n.startswith("replaced the earlier") for n in outcome.notes)


def test_a_variant_whose_cells_lost_cell_json_is_named_and_its_replay_kept(tmp_path) -> None:
    """Every block-m folder lost its cell.json: replay (even --force) names them and keeps
    block-m's earlier replay instead of rewriting the summary without it."""
    root = make_store(tmp_path)
    settings = ReplaySettings(baseline="baseline")
    replay_cells(sr.read_cells(root, "planted"), settings, kernel=planted_kernel)
    suite_file = root / "planted" / "replay.json"
    before = json.loads(suite_file.read_text())["summary"]["block-m"]
    lost = sorted(root.glob("planted/block-m--*"))
    for folder in lost:
        (folder / "cell.json").unlink()
    outcome = replay_cells(sr.read_cells(root, "planted"), settings, force=True)
    assert json.loads(suite_file.read_text())["summary"]["block-m"] == before
    for folder in lost:
        assert f"store check: {folder}: no cell.json, so not read as a cell" in outcome.notes


# -- the captures a replay is keyed by ------------------------------------------------------------
def _with_manifests(root: Path) -> Path:
    """Give every cell's captures the manifest.json store.capture writes (sha256 included)."""
    import hashlib

    for folder in root.glob("planted/*/run/captures"):
        entries = {}
        for path in sorted(folder.glob("step_*.safetensors")):
            step = int(path.stem.split("_")[-1])
            blob = path.read_bytes()
            entries[str(step)] = {"step": step, "file": path.name, "sequences": 2,
                                  "sequences_in_micro_batch": 2, "bytes": len(blob),
                                  "sha256": hashlib.sha256(blob).hexdigest()}  # fmt: skip
        (folder / "manifest.json").write_text(json.dumps({"steps": entries}))
    return root


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.glob("planted/**/replay.json"))}


def test_a_listed_capture_that_is_gone_stops_the_replay_and_writes_nothing(tmp_path) -> None:
    """One capture file deleted under a manifest that lists it: `replay --force` used to replay
    the other cell alone and rewrite the suite's replay.json from half its sources."""
    root = _with_manifests(make_store(tmp_path))
    settings = ReplaySettings(baseline="baseline")
    replay_cells(sr.read_cells(root, "planted"), settings, kernel=planted_kernel)
    before = _files(root)
    gone = sorted(root.glob("planted/baseline--*/run/captures/step_0000002.safetensors"))[0]
    gone.unlink()
    for force in (False, True):
        with pytest.raises(FlashprobeError, match=f"missing capture file {gone}"):
            replay_cells(sr.read_cells(root, "planted"), settings, force=force)
    assert _files(root) == before


def _copy_without_times(root: Path, to: Path) -> Path:
    """The store as `cp -r` (no -p), tar or another machine leaves it: every file time new."""
    shutil.copytree(root, to, copy_function=shutil.copyfile)
    later = 2_000_000_000
    for path in to.rglob("*"):
        os.utime(path, (later, later))
    return to


def test_a_copied_store_takes_more_variants_on_its_unchanged_captures(tmp_path) -> None:
    """Keyed by (step, name, size, mtime) a copy's captures looked rewritten: adding a variant
    stopped with 'made on other captures'. By sha256 the copy is the same replay."""
    root = _with_manifests(make_store(tmp_path / "a"))
    first = ReplaySettings(baseline="baseline", variants=("baseline", "block-m"))
    replay_cells(sr.read_cells(root, "planted"), first, kernel=planted_kernel)
    copy = _copy_without_times(root, tmp_path / "b")
    again = replay_cells(sr.read_cells(copy, "planted"), first, kernel=planted_kernel)
    assert [c["status"] for c in again.cells] == ["cached", "cached"]
    more = ReplaySettings(baseline="baseline", variants=("delta-fp32",))
    outcome = replay_cells(sr.read_cells(copy, "planted"), more, kernel=planted_kernel)
    assert any("kept the earlier replay of baseline, block-m" in n for n in outcome.notes)
    doc = json.loads((copy / "planted" / "replay.json").read_text())
    assert set(doc["summary"]) == {"baseline", "block-m", "delta-fp32"}
    # a rewritten capture (as a rerun's writer leaves it: new file, new sha256) still differs
    cell = next(c for c in sr.read_cells(copy, "planted") if c.variant == "baseline")
    path = capture_files(cell)[0][1]
    tensors = load_capture(1, path).tensors
    save_file({k: v + 1 for k, v in tensors.items()}, str(path))
    _with_manifests(copy)
    with pytest.raises(FlashprobeError, match=f"made on other captures of {cell.name}"):
        replay_cells(sr.read_cells(copy, "planted"), more, kernel=planted_kernel)


def _as_written_before_sha256(root: Path) -> None:
    """Make the store's replays what flashprobe wrote before the sha256: captures by file time
    (and their key with them), manifests without the sha256."""
    from flashprobe.attribution import replay_files as rf
    from flashprobe.attribution.replay_variants import choose, resolve_groups, trained_variants

    cells = sr.read_cells(root, "planted")
    chosen = choose("planted", trained_variants(cells), {}, root / "planted", None)
    for cell in cells:
        if not cell.replay_path.is_file():
            continue
        doc = json.loads(cell.replay_path.read_text())
        steps = capture_files(cell)
        groups = resolve_groups({v: chosen[v] for v in doc_variants(doc)}, cell, [])
        assert doc["key"] == rf.replay_key(steps, groups, doc["backend"])
        doc["captures"] = [[s, p.name, p.stat().st_size, p.stat().st_mtime_ns] for s, p in steps]
        doc["key"] = rf.replay_key(steps, groups, doc["backend"], doc["captures"])
        cell.replay_path.write_text(json.dumps(doc))
    for path in root.glob("planted/*/run/captures/manifest.json"):
        manifest = json.loads(path.read_text())
        for entry in manifest["steps"].values():
            del entry["sha256"]
        path.write_text(json.dumps(manifest))


def doc_variants(doc: dict) -> list[str]:
    return list(dict.fromkeys(r["variant"] for r in doc["records"]))


def test_a_replay_from_before_the_sha256_still_matches_or_is_replayed_again(tmp_path) -> None:
    """Older replays (captures by file time) stay cached on captures unchanged in place; in a
    copy their captures cannot be checked, so they are replayed again, not refused."""
    root = _with_manifests(make_store(tmp_path / "a"))
    first = ReplaySettings(baseline="baseline", variants=("baseline", "block-m"))
    replay_cells(sr.read_cells(root, "planted"), first, kernel=planted_kernel)
    _as_written_before_sha256(root)
    before = _files(root)
    again = replay_cells(sr.read_cells(root, "planted"), first, kernel=planted_kernel)
    assert [c["status"] for c in again.cells] == ["cached", "cached"]
    copy = _copy_without_times(root, tmp_path / "b")
    more = ReplaySettings(baseline="baseline", variants=("delta-fp32",))
    outcome = replay_cells(sr.read_cells(copy, "planted"), more, kernel=planted_kernel)
    assert [c["status"] for c in outcome.cells] == ["replayed", "replayed"]
    assert any("replayed baseline, block-m again too" in n for n in outcome.notes)
    doc = json.loads((copy / "planted" / "replay.json").read_text())
    assert set(doc["summary"]) == {"baseline", "block-m", "delta-fp32"}
    assert doc["untrained_variants"] == {}  # trained, though replayed from a subset's replay
    assert _files(root) == before  # the original store untouched
