"""The size-capped capture writer: round trip, trimming to the byte share, skipping, resume."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from flashprobe.store.capture import CaptureWriter, capture_file_name
from flashprobe.suites.cell_config import resolve_cell_config

CONFIG = {
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32},
    "train": {"steps": 8, "device": "cpu"},
    "kernel": {"preset": "sfa"},
}


def tensors(batch: int = 4) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    out = {}
    for name in ("q", "k", "v", "o", "do"):
        out[f"layer1.{name}"] = torch.randn(batch, 2, 32, 16, generator=gen).bfloat16()
    out["layer1.lse"] = torch.randn(batch, 2, 32, generator=gen)
    return out


def writer(tmp_path, max_bytes: int, steps=(2, 5)) -> CaptureWriter:
    setup = resolve_cell_config(
        {**CONFIG, "capture": {"layers": [1], "steps": list(steps), "max_bytes": max_bytes}}
    )
    return CaptureWriter(tmp_path / "captures", setup.capture, setup.train)


def test_round_trip_with_metadata(tmp_path) -> None:
    write = writer(tmp_path, 2**20)
    data = tensors()
    write(2, data)
    path = tmp_path / "captures" / capture_file_name(2)
    loaded = load_file(path)
    assert set(loaded) == set(data)
    for key, value in data.items():
        assert torch.equal(loaded[key], value) and loaded[key].dtype == value.dtype
    with safe_open(path, "pt") as handle:
        meta = handle.metadata()
    assert meta["step"] == "2" and json.loads(meta["layers"]) == [1]
    assert meta["sequences"] == "4" and float(meta["softmax_scale"]) == 0.25
    assert json.loads(meta["attention"])["1"][0]["spec"]["softmax"] == "stabilized"
    manifest = json.loads((tmp_path / "captures" / "manifest.json").read_text())
    assert manifest["steps"]["2"]["bytes"] == path.stat().st_size
    assert manifest["planned_steps"] == [2, 5]


def test_byte_cap_trims_sequences_then_skips(tmp_path) -> None:
    one_sequence = sum(t[:1].numel() * t.element_size() for t in tensors().values())
    cap = 2 * (2 * one_sequence + 4096)  # two steps: each share holds two sequences + header
    write = writer(tmp_path, cap)
    write(2, tensors())
    write(5, tensors())
    files = sorted((tmp_path / "captures").glob("*.safetensors"))
    assert sum(f.stat().st_size for f in files) <= cap
    assert all(load_file(f)["layer1.q"].shape[0] == 2 for f in files)
    assert torch.equal(load_file(files[0])["layer1.q"], tensors()["layer1.q"][:2])

    tiny = writer(tmp_path / "tiny", one_sequence // 2)
    tiny(2, tensors())
    manifest = json.loads((tmp_path / "tiny" / "captures" / "manifest.json").read_text())
    assert manifest["steps"]["2"]["file"] is None and "exceeds" in manifest["steps"]["2"]["skipped"]
    assert not list((tmp_path / "tiny" / "captures").glob("*.safetensors"))


def test_rewriting_a_step_replaces_its_entry(tmp_path) -> None:
    write = writer(tmp_path, 2**20)
    write(2, tensors())
    writer(tmp_path, 2**20)(2, tensors(batch=3))  # a resumed run redoes step 2
    manifest = json.loads((tmp_path / "captures" / "manifest.json").read_text())
    assert list(manifest["steps"]) == ["2"] and manifest["steps"]["2"]["sequences"] == 3
    assert not list((tmp_path / "captures").glob(".*"))  # no temporary files left


def test_layer_input_x_is_a_capture_tensor_counted_in_the_cap_and_trimmed_alike(tmp_path) -> None:
    from flashprobe.store.capture import TENSOR_NAMES

    assert "x" in TENSOR_NAMES
    data = {**tensors(), "layer1.x": torch.randn(4, 32, 32)}  # B × T × n_embd (fp32: 4 kB/seq)
    one_sequence = sum(t[:1].numel() * t.element_size() for t in data.values())
    without_x = one_sequence - 32 * 32 * 4
    cap = 2 * (3 * without_x + 4096)  # without x three sequences would fit a share; with x two
    assert 3 * one_sequence > cap // 2
    write = writer(tmp_path, cap)
    write(2, data)
    loaded = load_file(tmp_path / "captures" / capture_file_name(2))
    assert set(loaded) == set(data)
    assert loaded["layer1.q"].shape[0] == loaded["layer1.x"].shape[0] == 2
    assert torch.equal(loaded["layer1.x"], data["layer1.x"][:2])
    manifest = json.loads((tmp_path / "captures" / "manifest.json").read_text())
    assert manifest["steps"]["2"]["bytes"] <= cap // 2


def test_the_manifest_records_each_file_s_sha256(tmp_path) -> None:
    """What replay keys an unchanged capture by: it survives a copy that drops file times."""
    import hashlib

    writer(tmp_path, 2**20)(2, tensors())
    folder = tmp_path / "captures"
    entry = json.loads((folder / "manifest.json").read_text())["steps"]["2"]
    blob = (folder / capture_file_name(2)).read_bytes()
    assert entry["sha256"] == hashlib.sha256(blob).hexdigest() and entry["bytes"] == len(blob)
