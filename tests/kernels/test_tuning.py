"""Launch-configuration lookup (flashprobe.kernels.tuning): tuned entries, fallbacks, keys."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest

from flashprobe.kernels import sass, tuning


@pytest.fixture
def tuned_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "TUNED_DIR", tmp_path)
    tuning.clear_cache()
    yield tmp_path
    tuning.clear_cache()


def _entry(block_m: int) -> dict[str, int]:
    return {"block_m": block_m, "sub_n": 64, "num_warps": 4, "num_stages": 3}


def test_variant_names_the_switches_that_change_the_per_score_work() -> None:
    assert tuning.fwd_variant(False, False, False) == "onepass"
    assert tuning.fwd_variant(True, True, True, stabilized=True, stats=True) == (
        "twopass-p32-acc16-stab-stats"
    )


def test_a_variant_tuned_on_its_own_gets_its_entry_else_its_base_one(tuned_dir) -> None:
    base = tuning.fwd_key(64, True, 64, "bf16", "onepass")
    stab = tuning.fwd_key(64, True, 64, "bf16", "onepass-stab")
    (tuned_dir / "sm90.json").write_text(json.dumps({base: _entry(128), stab: _entry(64)}))
    assert tuning.forward_config("sm90", 64, True, 64, "bf16", "onepass-stab").block_m == 64
    assert tuning.forward_config("sm90", 64, True, 64, "bf16", "onepass-stats").block_m == 128
    assert tuning.forward_config("sm90", 64, True, 64, "bf16", "onepass").block_m == 128


def test_untuned_shapes_fall_back_to_the_heuristics(tuned_dir) -> None:
    config = tuning.forward_config("sm90", 128, False, 64, "bf16", "onepass-stab-stats")
    assert config == tuning.FwdConfig(block_m=128, sub_n=64, num_warps=8, num_stages=3)
    heavy = tuning.forward_config("sm90", 64, False, 64, "bf16", "twopass-stab")
    assert heavy.block_m == 64 and heavy.num_warps == 4


def test_the_entry_tuned_nearest_the_sequence_length_is_used(tuned_dir) -> None:
    key = tuning.fwd_key(64, True, 64, "bf16", "onepass")
    (tuned_dir / "sm90.json").write_text(json.dumps({
        key: _entry(128),  # tuned at tuning.TUNED_SEQ = 4096
        tuning.seq_key(key, 1024): _entry(64),
        tuning.seq_key(key, 16384): _entry(32),
    }))  # fmt: skip
    block_m = {seq: tuning.forward_config("sm90", 64, True, 64, "bf16", "onepass", seq).block_m
               for seq in (128, 1024, 2048, 3000, 4096, 8192, 12000, 65536)}  # fmt: skip
    # 2048 lies halfway (in log2) between 1024 and 4096: the shorter wins.
    assert block_m == {128: 64, 1024: 64, 2048: 64, 3000: 128, 4096: 128, 8192: 128,
                       12000: 32, 65536: 32}  # fmt: skip
    # A variant without entries of its own falls back to its base's, at the nearest length too.
    assert tuning.forward_config("sm90", 64, True, 64, "bf16", "onepass-stab", 900).block_m == 64


def test_a_length_tuned_only_at_another_length_uses_that_entry(tuned_dir) -> None:
    key = tuning.bwd_key(64, False, "bf16", "dot16")
    entry = {"block_m1": 64, "block_n1": 64, "block_m2": 64, "block_n2": 64, "num_warps": 4,
             "num_stages": 2}  # fmt: skip
    (tuned_dir / "sm90.json").write_text(json.dumps({tuning.seq_key(key, 16384): entry}))
    assert tuning.backward_config("sm90", 64, False, "bf16", "dot16", 1024).block_m1 == 64
    assert tuning.seq_key(key, tuning.TUNED_SEQ) == key


def test_backward_variants_and_their_fallback(tuned_dir) -> None:
    assert tuning.bwd_variant(False) == "dot16" and tuning.bwd_variant(True) == "dot32"
    key = tuning.bwd_key(64, True, "bf16", "dot16")
    entry = {"block_m1": 32, "block_n1": 64, "block_m2": 64, "block_n2": 32, "num_warps": 4,
             "num_stages": 3}  # fmt: skip
    (tuned_dir / "sm90.json").write_text(json.dumps({key: entry}))
    assert tuning.backward_config("sm90", 64, True, "bf16", "dot16") == tuning.BwdConfig(**entry)
    assert tuning.backward_config("sm90", 64, True, "bf16", "dot32").block_m1 == 32


def test_the_atomic_dq_backward_has_its_own_variant_and_heuristic(tuned_dir) -> None:
    assert tuning.bwd_variant(False, True) == "dot16-atomic"
    assert tuning.bwd_variant(True, True) == "dot32-atomic"
    ordered = {"block_m1": 32, "block_n1": 64, "block_m2": 64, "block_n2": 32, "num_warps": 4,
               "num_stages": 3}  # fmt: skip
    key = tuning.bwd_key(64, True, "bf16", "dot16")
    (tuned_dir / "sm90.json").write_text(json.dumps({key: ordered}))
    # the ordered variant's tuned entry is not the atomic one's: that falls back to its heuristic
    config = tuning.backward_config("sm90", 64, True, "bf16", "dot16-atomic")
    assert config == tuning.atomic_dq_heuristic(64, False)
    assert (config.block_m2, config.block_n2) == (config.block_m1, config.block_n1)
    atomic = {**ordered, "block_m1": 16, "block_m2": 16}
    key = tuning.bwd_key(64, True, "bf16", "dot16-atomic")
    (tuned_dir / "sm90.json").write_text(json.dumps({key: atomic}))
    tuning.clear_cache()
    assert tuning.backward_config("sm90", 64, True, "bf16", "dot16-atomic").block_m1 == 16


def test_presets_map_to_the_variants_the_tuned_file_holds() -> None:
    from flashprobe.kernels.launch import forward_variant
    from flashprobe.spec import make_spec

    assert forward_variant(make_spec("fa2"), False, False) == "onepass"
    assert forward_variant(make_spec("sfa"), False, False) == "onepass-stab"
    assert forward_variant(make_spec("fa2"), False, True) == "onepass-stats"
    tuned = json.loads((tuning.TUNED_DIR / "sm90.json").read_text())
    for variant in ("onepass", "onepass-stab", "onepass-stats"):
        assert tuning.fwd_key(64, True, 64, "bf16", variant) in tuned


_COMPILE_CHECK = """
import json, sys
from flashprobe.kernels import launch, sass, tuning
from flashprobe.spec import make_spec

found = {}
for head_dim, block_n, p_bar in json.loads(sys.argv[1]):
    spec = make_spec("fa2", {"block_n": block_n, "p_bar_precision": p_bar})
    variant = launch.forward_variant(spec, False, True)
    config = tuning.forward_config("sm00", head_dim, True, block_n, "bf16", variant)
    constexprs = {"HEAD_DIM": head_dim, "BLOCK_M": config.block_m, "BLOCK_N": block_n,
                  "TWO_PASS": False, "CAUSAL": True, "INTERPRET": False,
                  **launch.forward_switches(spec, instrument=True, keep_o_fp32=False)}
    kernel = sass.compile_forward(constexprs, config.num_warps, config.num_stages)
    loop = sass.first_loop(sass.disassemble(kernel))
    assert loop, "no key-tile loop found in the SASS"
    found[f"d{head_dim} bn{block_n} {p_bar}"] = {
        "spills": sass.local_memory_ops(loop), "shared": kernel.metadata.shared}
print(json.dumps(found))
"""
SPILL_SHAPES = [(64, 128, "bf16"), (128, 128, "bf16"), (64, 64, "bf16")]
SHARED_SHAPES = [(128, 128, "bf16"), (256, 128, "bf16")]


@functools.cache
def heuristic_configs_compiled() -> dict[str, dict[str, int]]:
    """The instrumented forward (the heaviest one-pass variant) compiled for sm_90 with the
    heuristic configs (Triton's bundled ptxas, no GPU; a subprocess without TRITON_INTERPRET)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    shapes = sorted(set(SPILL_SHAPES) | set(SHARED_SHAPES))
    result = subprocess.run(
        [sys.executable, "-c", _COMPILE_CHECK, json.dumps(shapes)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(found) == len(shapes)
    return found


def _label(head_dim: int, block_n: int, p_bar: str) -> str:
    return f"d{head_dim} bn{block_n} {p_bar}"


def test_heuristic_forward_configs_do_not_spill_registers_on_sm90() -> None:
    """Untuned shapes (another GPU, fp16, a 128-key tile) get the heuristic configs; their
    key-tile loop has no local-memory traffic. The 4-warp config this replaced spilled there at
    d 64 with 128-key tiles and ran 35–45% slower on the H200 (docs/kernel-performance.md)."""
    found = heuristic_configs_compiled()
    assert {_label(*s): found[_label(*s)]["spills"] for s in SPILL_SHAPES} == {
        _label(*s): 0 for s in SPILL_SHAPES
    }


def test_heuristic_forward_configs_fit_in_sm90_shared_memory() -> None:
    """128-key tiles at d 256 asked for 288 KB with two stages, more than an H100's or H200's
    227 KB; the heuristic now gives them one (96 KB; with fp32 P̄ 192 KB, not compiled here as
    it takes half a minute)."""
    found = heuristic_configs_compiled()
    shared = {_label(*s): found[_label(*s)]["shared"] for s in SHARED_SHAPES}
    assert all(0 < n <= sass.SM90_SHARED_MEMORY for n in shared.values()), shared


_CAPPED_CHECK = """
import json, sys
from flashprobe.kernels import launch, sass, tuning
from flashprobe.spec import make_spec

PRESETS = {"onepass": ("fa2", False), "onepass-stab": ("sfa", False),
           "onepass-stats": ("fa2", True)}
found = {}
for key, entry, cap in json.loads(sys.argv[1]):
    _, head_dim, mask, block_n, _, variant = key.split("|")[:6]
    preset, instrument = PRESETS[variant]
    spec = make_spec(preset)
    constexprs = {"HEAD_DIM": int(head_dim[1:]), "BLOCK_M": entry["block_m"],
                  "BLOCK_N": int(block_n[2:]), "TWO_PASS": False, "CAUSAL": mask == "causal",
                  "INTERPRET": False,
                  **launch.forward_switches(spec, instrument=instrument, keep_o_fp32=False)}
    kernel = sass.compile_forward(constexprs, entry["num_warps"], entry["num_stages"], cap)
    loop = sass.first_loop(sass.disassemble(kernel))
    found[f"{key} cap {cap}"] = {"registers": sass.registers(kernel),
                                 "spills": sass.local_memory_ops(loop)}
print(json.dumps(found))
"""


def test_tuned_register_caps_hold_without_spilling_on_sm90() -> None:
    """A tuned forward config may cap registers (`max_registers`) so that two blocks share an
    SM; the cap must not buy that with local-memory traffic in the key-tile loop. Control: a
    cap of 96 on the same kernel does spill, so the spill count is read correctly."""
    tuned = json.loads((tuning.TUNED_DIR / "sm90.json").read_text())
    capped = {(k.split("|n")[0], json.dumps(e, sort_keys=True)) for k, e in tuned.items()
              if e.get("max_registers")}  # fmt: skip
    capped = [(k, json.loads(e), json.loads(e)["max_registers"]) for k, e in sorted(capped)]
    assert capped, "no tuned config caps registers"
    control = (capped[0][0], capped[0][1], 96)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", _CAPPED_CHECK, json.dumps([*capped, control])],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for key, _, cap in capped:
        usage = found[f"{key} cap {cap}"]
        assert usage["registers"] <= cap and usage["spills"] == 0, (key, usage)
    assert found[f"{control[0]} cap 96"]["spills"] > 0, found


def test_smaller_configs_drop_stages_then_split_the_key_tile() -> None:
    config = tuning.FwdConfig(block_m=64, sub_n=64, num_warps=4, num_stages=3, max_one_pass=128)
    got = [(c.num_stages, c.max_one_pass) for c in tuning.smaller_configs(config)]
    assert got == [(2, 128), (1, 128), (2, 64), (1, 64)]
    assert all(c.block_m == 64 and c.num_warps == 4 for c in tuning.smaller_configs(config))
    one_pass_only = tuning.FwdConfig(block_m=64, sub_n=64, num_warps=4, num_stages=1,
                                     max_one_pass=64)  # fmt: skip
    assert tuning.smaller_configs(one_pass_only) == []
    bwd = tuning.BwdConfig(32, 128, 128, 32, num_warps=4, num_stages=3)
    assert [c.num_stages for c in tuning.smaller_configs(bwd)] == [2, 1]


_FP32_DOTS_CHECK = """
import json
from flashprobe.kernels import launch, sass, tuning
from flashprobe.spec import make_spec

spec = make_spec("fp32")
fwd = tuning.forward_config("sm90", 64, True, 64, "bf16",
                            launch.forward_variant(spec, False, False), 1024)
found = {"fwd": sass.compile_forward(
    {"HEAD_DIM": 64, "BLOCK_M": fwd.block_m, "BLOCK_N": 64, "TWO_PASS": False, "CAUSAL": True,
     "INTERPRET": False, **launch.forward_switches(spec, instrument=False, keep_o_fp32=True)},
    fwd.num_warps, fwd.num_stages)}
bwd = tuning.backward_config("sm90", 64, True, "bf16", tuning.bwd_variant(True), 1024)
found["bwd"] = sass.compile_backward(
    {"HEAD_DIM": 64, "BLOCK_M1": bwd.block_m1, "BLOCK_N1": bwd.block_n1,
     "BLOCK_M2": bwd.block_m2, "BLOCK_N2": bwd.block_n2, "CAUSAL": True, "SCORE_LOW": False,
     "FUSED": False, "P_LOW": False, "DS_LOW": False, "INTERPRET": False},
    bwd.num_warps, bwd.num_stages)
found["delta"] = sass.compile_delta(
    {"HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 64, "SOURCE": 2, "CAUSAL": True,
     "SCORE_LOW": False, "FUSED": False, "DELTA_LOW": False, "INTERPRET": False}, 4, 2)
out = {}
for name, kernel in found.items():
    ops = sass.opcodes(sass.disassemble(kernel))
    out[name] = {"mma": ops.count("HGMMA"), "ffma": ops.count("FFMA"),
                 "spills": sass.local_memory_ops(ops)}
print(json.dumps(out))
"""


def test_fp32_operand_dots_run_on_tensor_cores_on_sm90() -> None:
    """fp32 P̄ and dS (the fp32 preset) and δ from O recomputed in fp32 multiply through three
    bf16 pieces on the tensor cores (common.dot_f32), not one FMA per product: the IEEE fp32
    dot took 4,120 FFMA in the forward and 8,192 with spills in the backward."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", _FP32_DOTS_CHECK], capture_output=True, text=True, env=env,
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for name, usage in found.items():
        assert usage["mma"] > 0 and usage["ffma"] < 256 and usage["spills"] == 0, (name, usage)


_ATOMIC_DQ_CHECK = """
import json, sys
from flashprobe.kernels import launch, sass, tuning
from flashprobe.spec import make_spec

found = {}
for head_dim, preset in json.loads(sys.argv[1]):
    spec = make_spec(preset)
    config = tuning.backward_config("sm00", head_dim, True, "bf16",
                                    tuning.bwd_variant(preset == "fp32", True))
    kernel = sass.compile_backward(
        {"HEAD_DIM": head_dim, "BLOCK_M1": config.block_m1, "BLOCK_N1": config.block_n1,
         "BLOCK_M2": config.block_m2, "BLOCK_N2": config.block_n2, "CAUSAL": True,
         "INTERPRET": False, **launch.backward_switches(spec), "ATOMIC_DQ": True,
         "KEY_MASK": True}, config.num_warps, config.num_stages)
    ops = sass.opcodes(sass.disassemble(kernel))
    found[f"d{head_dim} {preset}"] = {
        "registers": sass.registers(kernel), "spills": sass.local_memory_ops(ops),
        "shared": kernel.metadata.shared, "red": sum(op.startswith("RED") for op in ops),
        "atom": sum(op.startswith("ATOM") for op in ops)}
print(json.dumps(found))
"""


def test_the_atomic_dq_heuristic_compiles_without_spills_on_sm90() -> None:
    """The atomic-dQ backward on its heuristic tiles (tuning.atomic_dq_heuristic; padding keys
    masked), compiled for sm_90: no local-memory traffic anywhere, within shared memory, and
    dQ's adds are fire-and-forget reductions (RED, no ATOM waiting for the old value).
    64×128 tiles, FlashAttention-2's, spill at d 128 (about 250 LDL/STL, Triton 3.9)."""
    shapes = [(64, "fa2"), (128, "fa2"), (128, "fp32")]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", _ATOMIC_DQ_CHECK, json.dumps(shapes)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(found) == len(shapes)
    for name, usage in found.items():
        assert usage["spills"] == 0 and usage["red"] > 0 and usage["atom"] == 0, (name, usage)
        assert 0 < usage["shared"] <= sass.SM90_SHARED_MEMORY, (name, usage)


_TMA_CHECK = """
import json
from flashprobe.kernels import launch, sass, tuning
from flashprobe.spec import make_spec

spec = make_spec("fa2")
found = {}
for head_dim in (64, 128):
    for tma in (False, True):
        fwd = tuning.forward_config("sm00", head_dim, True, 64, "bf16", "onepass")
        kernel = sass.compile_forward(
            {"HEAD_DIM": head_dim, "BLOCK_M": fwd.block_m, "BLOCK_N": 64, "TWO_PASS": False,
             "CAUSAL": True, "INTERPRET": False, "TMA": tma,
             **launch.forward_switches(spec, instrument=False, keep_o_fp32=False)},
            fwd.num_warps, fwd.num_stages)
        loop = sass.first_loop(sass.disassemble(kernel))
        bwd = tuning.backward_config("sm00", head_dim, True, "bf16", "dot16")
        backward = sass.compile_backward(
            {"HEAD_DIM": head_dim, "BLOCK_M1": bwd.block_m1, "BLOCK_N1": bwd.block_n1,
             "BLOCK_M2": bwd.block_m2, "BLOCK_N2": bwd.block_n2, "CAUSAL": True,
             "INTERPRET": False, "TMA": tma, **launch.backward_switches(spec)},
            bwd.num_warps, bwd.num_stages)
        ops = sass.opcodes(sass.disassemble(backward))
        found[f"d{head_dim} tma {tma}"] = {
            "fwd_tma_loads": sum(op.startswith("UTMALDG") for op in loop),
            "fwd_async_copies": sum(op.startswith("LDGSTS") for op in loop),
            "fwd_spills": sass.local_memory_ops(loop), "fwd_shared": kernel.metadata.shared,
            "bwd_tma_loads": sum(op.startswith("UTMALDG") for op in ops),
            "bwd_shared": backward.metadata.shared}
print(json.dumps(found))
"""


def test_tma_loads_compile_to_the_copy_engine_on_sm90() -> None:
    """`tma` launches (tuning.FwdConfig.tma, BwdConfig.tma) compiled for sm_90 with the
    heuristic configs: the forward's key-tile loop fetches K and V with TMA (UTMALDG) instead of
    per-thread async copies (LDGSTS), without spilling; the backward's loops use TMA too; both
    fit in shared memory. Control: the pointer build has no UTMALDG."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", _TMA_CHECK], capture_output=True, text=True, env=env, timeout=900
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for head_dim in (64, 128):
        pointer, tma = found[f"d{head_dim} tma False"], found[f"d{head_dim} tma True"]
        assert pointer["fwd_tma_loads"] == 0 and pointer["bwd_tma_loads"] == 0, pointer
        assert pointer["fwd_async_copies"] > 0, pointer
        assert tma["fwd_tma_loads"] > 0 and tma["fwd_async_copies"] == 0, tma
        assert tma["fwd_spills"] == 0 and tma["bwd_tma_loads"] > 0, tma
        for usage in (tma["fwd_shared"], tma["bwd_shared"]):
            assert 0 < usage <= sass.SM90_SHARED_MEMORY, tma
