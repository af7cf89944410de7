"""The logit-scale probe: inputs at a target logit, errors against fp64, variant parsing."""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.numerics.gate import GATE_FACTOR, GATE_FLOORS
from flashprobe.probes.logit_scale import (
    TORCH_REFERENCE,
    LogitScaleConfig,
    make_inputs,
    parse_variant,
    run_logit_scale,
    suite_variants,
    variants_from_options,
)
from flashprobe.spec import preset


def small(**overrides) -> LogitScaleConfig:
    settings = dict(variants={"fa2": preset("fa2")}, logits=(1000.0,), seq=64, heads=2, head_dim=16)
    settings.update(overrides)
    return LogitScaleConfig(**settings)


@pytest.mark.parametrize("target", [3.0, 100.0, 5000.0])
@pytest.mark.parametrize("causal", [True, False])
def test_inputs_reach_the_target_logit_in_every_head(target: float, causal: bool) -> None:
    config = small(causal=causal, seq=48)
    q, k, v, do = make_inputs(target, config, seed=1)
    assert all(t.dtype == torch.bfloat16 and t.shape == (1, 2, 48, 16) for t in (q, k, v, do))
    logits = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(16)
    if causal:
        logits = logits.tril()
    largest = logits.abs().amax(dim=(-2, -1)).flatten()
    assert torch.allclose(largest, torch.full_like(largest, target), rtol=0.02)


def test_same_seed_same_numbers_and_seeds_differ() -> None:
    config = small(seeds=(0, 1))
    first, again = run_logit_scale(config), run_logit_scale(config)
    assert [r.errors for r in first.rows] == [r.errors for r in again.rows]
    fa2 = first.rows[0].errors["dq"]
    assert len(fa2) == 2 and fa2[0] != fa2[1]


def test_bf16_scores_break_the_gradients_at_large_logits() -> None:
    """What the probe is for: at logits of 1,000 the paper's released kernel (bf16 scores) gets
    dQ wrong by tens of percent, like plain bf16 PyTorch attention, while fa2 (fp32 scores)
    stays near 1%; restoring fp32 scores alone removes most of it."""
    variants = {
        "fa2": preset("fa2"),
        "paper-code": preset("paper-code"),
        "score-fp32": parse_variant("paper-code:score_precision=fp32")[1],
    }
    rows = {r.variant: r for r in run_logit_scale(small(variants=variants)).rows}
    paper, fa2, restored = rows["paper-code"], rows["fa2"], rows["score-fp32"]
    assert paper.mean("dq") > 0.1 and fa2.mean("dq") < 0.03
    assert restored.mean("dq") < paper.mean("dq") / 5
    assert fa2.mean("dq_cos") > 0.999 and paper.mean("dq_cos") < 0.99  # it points elsewhere
    torch_dq = rows[TORCH_REFERENCE].mean("dq")
    assert 0.5 < paper.mean("dq") / torch_dq < 2
    assert rows[TORCH_REFERENCE].mean("delta") is None


def test_small_logits_pass_the_error_gate() -> None:
    """At logits of 10 every preset is within the project's gate of plain bf16 attention."""
    variants = {name: preset(name) for name in ("fa2", "paper-code", "sfa", "fp32")}
    rows = run_logit_scale(small(variants=variants, logits=(10.0,))).rows
    reference = next(r for r in rows if r.variant == TORCH_REFERENCE)
    for row in rows:
        for quantity in ("o", "dq", "dk", "dv"):
            bound = GATE_FACTOR * reference.mean(quantity) + GATE_FLOORS[torch.bfloat16]
            assert row.mean(quantity) <= bound, (row.variant, quantity)


def test_report_document() -> None:
    doc = run_logit_scale(small(seeds=(0, 2))).to_dict()
    assert doc["config"]["seeds"] == [0, 2] and doc["config"]["variants"]["fa2"]["block_n"] == 64
    assert {r["variant"] for r in doc["rows"]} == {"fa2", TORCH_REFERENCE}
    row = doc["rows"][0]
    assert set(row) >= {
        "target_logit",
        "max_logit",
        "o",
        "delta",
        "dq",
        "dk",
        "dv",
        "dq_cos",
        "per_seed",
    }
    assert len(row["per_seed"]["dq"]) == 2
    assert doc["environment"]["torch"] == torch.__version__


def test_parse_variant() -> None:
    name, spec = parse_variant("paper-code:score_precision=fp32,block_n=64")
    assert name == "paper-code:score_precision=fp32,block_n=64"
    assert spec.score_precision == "fp32" and spec.block_n == 64 and spec.block_m == 512


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope", "unknown preset 'nope'"),
        ("fa2:", "nothing after ':'"),
        ("fa2:ties=2", "unknown kernel spec field 'ties'"),
        ("fa2:block_n=3", "variant 'fa2:block_n=3'"),
        ("fa2:beta=3,beta=4", "'beta' given twice"),  # silently beta=4 before
    ],
)
def test_bad_variants(text: str, message: str) -> None:
    with pytest.raises(FlashprobeError, match=message):
        parse_variant(text)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"variants": {}}, "at least one variant"),
        ({"logits": (0.0,)}, "--logits must be positive"),
        ({"logits": (math.nan,)}, "--logits must be positive"),
        ({"logits": (1e80,)}, "--logits must be positive numbers below 3.4e"),  # ran: NaN table
        ({"seeds": ()}, "at least one seed"),
        ({"seeds": (2**64,)}, "--seed must be in"),
        ({"seeds": (-1,)}, "--seed must be in"),
        ({"seq": 1}, "--seq must be at least 2"),
        ({"heads": 0}, "--heads must be at least 1"),
        ({"head_dim": 48}, "--head-dim must be a power of two"),
        ({"seq": 8192}, "too long for the CPU emulator"),
        # within the per-head limit, but hundreds of GB in all: refused before allocating
        ({"seq": 4096, "heads": 2000}, "too large for the CPU emulator"),
        ({"head_dim": 1 << 40}, "too large for the CPU emulator"),
    ],
)
def test_bad_configs(overrides: dict, message: str) -> None:
    with pytest.raises(FlashprobeError, match=message):
        small(**overrides)


def test_variants_of_a_suite_file() -> None:
    kernels, left_out = suite_variants("adamw-attribution.yaml")
    assert left_out == []
    assert kernels["paper-code"] == preset("paper-code")
    assert kernels["score-fp32"].score_precision == "fp32"
    assert kernels["fa2-score-bf16"] == parse_variant("fa2:score_precision=bf16")[1]


def test_a_variant_whose_kernel_follows_a_grid_axis_gives_one_entry_per_point(tmp_path) -> None:
    suite = tmp_path / "grid.yaml"
    suite.write_text(
        "name: grid\nbase: {train: {device: cpu}}\n"
        "variants: {fa2: {kernel: {preset: fa2}}, pc: {kernel: {preset: paper-code}}}\n"
        "axes: {kernel.block_n: [64, 128]}\n"
    )
    kernels, left_out = suite_variants(str(suite))
    assert left_out == []
    assert sorted(kernels) == ["fa2 @ kernel.block_n=128", "fa2 @ kernel.block_n=64",
                               "pc @ kernel.block_n=128", "pc @ kernel.block_n=64"]  # fmt: skip
    assert kernels["pc @ kernel.block_n=64"].block_n == 64
    assert kernels["pc @ kernel.block_n=128"].score_precision == "bf16"


def test_suite_variants_without_one_kernel_are_left_out() -> None:
    kernels, left_out = suite_variants("gpt2")
    assert set(left_out) == {"fp32-attention", "flash-layer2-only"}
    assert "paper-code" in kernels


def test_a_suite_without_one_kernel_variant_is_one_error(tmp_path) -> None:
    """Every variant left out: one error naming them (was a stderr note, then "needs at least
    one variant" on a second line)."""
    suite = tmp_path / "sdpa.yaml"
    suite.write_text(
        "name: sdpa\nbase: {train: {device: cpu}, model: {attention: {impl: sdpa}}}\n"
        "variants: {a: {}, b: {}}\n"
    )
    with pytest.raises(FlashprobeError, match=r"flashprobe kernel .*\(left out: a, b\)"):
        variants_from_options([], str(suite))
    chosen, left_out = variants_from_options(["fa2"], str(suite))  # --variant still runs
    assert list(chosen) == ["fa2"] and left_out == ["a", "b"]


def test_variant_options() -> None:
    chosen, _ = variants_from_options([], None)
    assert list(chosen) == ["fa2", "paper-code", "sfa", "paper-sfa", "fp32"]
    chosen, _ = variants_from_options(["fa2"], "adamw-attribution.yaml")
    assert next(iter(chosen)) == "fa2" and "score-fp32" in chosen
    with pytest.raises(FlashprobeError, match="different kernels"):  # gpt2's sfa: paper-sfa
        variants_from_options(["sfa"], "gpt2")
