"""tools/triton_ws_probe.py: the warp-specialised fa2 forward probe, checked on the CPU under
Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1 without a GPU)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location(
    "triton_ws_probe", ROOT / "tools" / "triton_ws_probe.py"
)
probe = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(probe)  # type: ignore[union-attr]


def test_the_probe_matches_the_fp64_golden_as_bf16_torch_does() -> None:
    """Each tile config, warp_specialize off and on, within 2× bf16 PyTorch's error + the bf16
    floor (2^-10, under the 1e-3 this test allowed before it used numerics.gate)."""
    result = probe.check()
    assert len(result["probe"]) == 4
    for label, found in result["probe"].items():
        assert math.isfinite(found["error"]) and found["passed"], label
        assert found["bound"] <= 2 * result["torch_bf16"] + 1e-3, label


def test_uneven_tiles_are_refused() -> None:
    q = torch.zeros(1, 1, 96, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="not a multiple"):
        probe.forward(q, q, q, (64, 64, 4, 2), False)


def test_the_summary_names_the_best_config_each_way() -> None:
    row = {
        "shape": "B32 H16 N1024 D64 full", "fa2_ms": 1.0, "sdpa-cudnn_ms": 0.8,
        "128x64 w4 s2": {"ms": 1.25, "passed": True},
        "128x128 w8 s3": {"ms": 0.9, "passed": True},
        "128x64 w4 s2 ws": {"ms": 0.8, "passed": True},
        "128x128 w8 s3 ws": {"ms": None, "note": "x"},
        "128x64 w4 s3 ws": {"ms": 0.5, "error": math.inf, "passed": False},
    }  # fmt: skip
    line = probe.summary_line(row)
    assert "128x128 w8 s3: 1.11× fa2, 0.89× cuDNN" in line
    # the fastest ws config gave a wrong output (as w4 s3 did on an H200): named, not the best
    assert "128x64 w4 s2 ws: 1.25× fa2, 1.00× cuDNN" in line
    assert line.endswith("wrong output: 128x64 w4 s3 ws")


def test_a_shape_is_timed_config_by_config_and_saved_before_each_compile(monkeypatch) -> None:
    """time_shape's flow on the CPU: inputs made small, the timer stubbed; cuDNN cannot run here
    and is recorded as such; each config is saved as "compiling" before it compiles."""
    from flashprobe.probes import benchmark

    here = "cuda" if torch.cuda.is_available() else "cpu"

    def small_inputs(shape, seed=0, device="cuda"):
        gen = torch.Generator().manual_seed(seed)
        return tuple(
            torch.randn(1, 2, 128, 64, generator=gen).to(here, torch.bfloat16) for _ in range(4)
        )

    monkeypatch.setattr(benchmark, "make_inputs", small_inputs)
    monkeypatch.setattr(benchmark, "_do_bench_median", lambda step: (step(), 1.0)[1])
    monkeypatch.setattr(probe, "CONFIGS", [(64, 64, 4, 2)])
    saved: list[dict] = []
    row: dict = {}
    probe.time_shape(1, 2, 128, 64, row, lambda: saved.append(dict(row)))
    assert saved[0]["64x64 w4 s2"] == {"ms": None, "note": "compiling"}
    assert saved[1]["64x64 w4 s2 ws"] == {"ms": None, "note": "compiling"}
    assert row["fa2_ms"] == 1.0 and row["fa2_error"] < 1e-2
    if here == "cpu":
        assert row["sdpa-cudnn_ms"] is None and row["sdpa-cudnn_note"]  # no cuDNN on a CPU
    for label in ("64x64 w4 s2", "64x64 w4 s2 ws"):
        assert row[label]["ms"] == 1.0 and row[label]["passed"], label
    assert row["torch_bf16_error"] < 1e-2
    assert "fa2" in probe.summary_line(row)


def test_check_records_its_environment_and_table_reprints_a_saved_file(tmp_path, capsys) -> None:
    out = tmp_path / "probe.json"
    assert probe.main(["--check", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["environment"]["torch"] == torch.__version__ and saved["seed"] == 0
    row = {"shape": "S", "fa2_ms": 2.0, "a": {"ms": 1.0, "error": 0.002},
           "a ws": {"ms": 0.5, "error": math.inf}}  # fmt: skip
    out.write_text(json.dumps({**saved, "shapes": [row]}))
    capsys.readouterr()
    assert probe.main(["--table", str(out)]) == 0
    # a file without the gate's verdict: a non-finite error is a wrong output
    assert capsys.readouterr().out.strip() == "S | fa2 2.000 ms | a: 2.00× fa2 | wrong output: a ws"


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "No such file"), (b"\xff\xfe", "not UTF-8"), ("{", "not JSON"),
     ("{}", "no list of shapes"), ('{"shapes": [{"x": 1}]}', "malformed shape row")],
)  # fmt: skip
def test_table_refuses_a_file_it_did_not_write_in_one_line(tmp_path, capsys, content, needle):
    path = tmp_path / "probe.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exited:
        probe.main(["--table", str(path)])
    assert exited.value.code == 2 and needle in capsys.readouterr().err


def test_out_refuses_to_overwrite_before_any_work(tmp_path, capsys) -> None:
    out = tmp_path / "probe.json"
    out.write_text("kept")
    with pytest.raises(SystemExit) as exited:
        probe.main(["--check", "--out", str(out)])
    assert exited.value.code == 2 and "exists; refusing to overwrite" in capsys.readouterr().err
    assert out.read_text() == "kept"
