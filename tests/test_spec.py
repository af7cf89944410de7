"""KernelSpec: presets, overrides, YAML, validation, hashing."""

from __future__ import annotations

import dataclasses
import math

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.spec import (
    FIELD_DOCS,
    FIELD_NAMES,
    PRESET_DOCS,
    PRESETS,
    KernelSpec,
    make_spec,
    parse_assignments,
    preset,
    resolve_spec,
    spec_from_yaml,
    split_variant,
)


# -- presets ------------------------------------------------------------------------------------
def test_presets_are_the_documented_kernels() -> None:
    assert set(PRESETS) == {"fa2", "paper-code", "sfa", "paper-sfa", "fp32"} == set(PRESET_DOCS)
    fa2 = PRESETS["fa2"]
    assert fa2 == KernelSpec()
    assert (fa2.block_n, fa2.score_precision, fa2.softmax) == (64, "fp32", "standard")
    assert (fa2.p_bar_precision, fa2.accumulator, fa2.ds_precision) == ("bf16", "fp32", "bf16")
    assert (fa2.delta_source, fa2.delta_precision) == ("o_lowp", "fp32")
    assert fa2.l_from_rounded_p is False and fa2.block_m is None

    paper = PRESETS["paper-code"]
    assert paper.diff(fa2) == {
        "block_m": 512,
        "block_n": 512,
        "score_precision": "bf16",
        "accumulator": "bf16",
        "delta_precision": "bf16",
    }
    assert PRESETS["sfa"].diff(fa2) == {"softmax": "stabilized"} and PRESETS["sfa"].beta == 2.0
    # the release clamps each tile's row sum at 1e-10 (attention.py, EPSILON)
    # and runs causal key tiles wholly past a row (masked_fill with −max, attention.py l.76-78)
    assert PRESETS["paper-sfa"].diff(paper) == {
        "softmax": "stabilized",
        "row_sum_floor": 1e-10,
        "masked_tiles": "release",
    }
    assert all(p.row_sum_floor is None for n, p in PRESETS.items() if n != "paper-sfa")
    assert all(p.masked_tiles == "skip" for n, p in PRESETS.items() if n != "paper-sfa")
    assert PRESETS["fp32"].diff(fa2) == {
        "p_bar_precision": "fp32",
        "delta_source": "o_fp32",
        "ds_precision": "fp32",
        "l_from_rounded_p": True,
    }
    assert PRESETS["sfa"].stabilized and not fa2.stabilized
    assert not fa2.untiled and fa2.replace(block_n="full").untiled


def test_every_field_is_documented() -> None:
    assert set(FIELD_DOCS) == set(FIELD_NAMES)


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_describes_itself(name: str) -> None:
    assert preset(name) is PRESETS[name]
    assert PRESETS[name].describe() == name
    assert make_spec(name) == PRESETS[name]


# -- overrides and parsing -----------------------------------------------------------------------
def test_overrides_and_mappings() -> None:
    spec = make_spec("fa2", {"softmax": "stabilized", "beta": 4})
    assert spec.beta == 4.0 and isinstance(spec.beta, float)
    assert spec.describe() == "sfa+beta=4"
    assert make_spec({"preset": "fa2", "softmax": "stabilized", "beta": 4}) == spec
    assert make_spec({"softmax": "stabilized"}) == PRESETS["sfa"]  # preset defaults to fa2
    assert make_spec(None) == PRESETS["fa2"] == resolve_spec(None)
    assert PRESETS["sfa"].replace(beta=4) == spec
    assert resolve_spec(spec) is spec
    assert resolve_spec("sfa") == PRESETS["sfa"]


@pytest.mark.parametrize("word", ["full", "untiled", "none", "null", "FULL", None])
def test_untiled_spellings(word: str | None) -> None:
    assert make_spec("fa2", {"block_n": word}).block_n is None
    assert make_spec("fa2", {"block_n": word}).describe() == "fa2+block_n=full"


def test_parse_assignments_reads_yaml_scalars() -> None:
    raw = ["block_n=32", "beta=2.5", "l_from_rounded_p=true", "softmax=sfa", "block_m="]
    parsed = parse_assignments(raw)
    assert parsed == {
        "block_n": 32,
        "beta": 2.5,
        "l_from_rounded_p": True,
        "softmax": "sfa",
        "block_m": None,
    }
    with pytest.raises(FlashprobeError, match="expected key=value"):
        parse_assignments(["block_n"])


def test_parse_assignments_can_refuse_a_repeated_key() -> None:
    assert parse_assignments(["beta=3", "beta=4"]) == {"beta": 4}  # --set: the last one wins
    with pytest.raises(FlashprobeError, match="'beta' given twice"):
        parse_assignments(["beta=3", " beta =4"], unique=True)


def test_parse_assignments_reads_exponent_floats() -> None:
    # YAML 1.1 would keep '4e-3' a string; users (and YAML 1.2) mean a number.
    assert parse_assignments(["tie_tolerance=4e-3", "beta=2E+0"]) == {
        "tie_tolerance": 0.004,
        "beta": 2.0,
    }


# -- YAML ---------------------------------------------------------------------------------------
def test_yaml_round_trip(tmp_path) -> None:
    flat = tmp_path / "flat.yaml"
    body = ["preset: paper-code", "block_n: full", "softmax: stabilized", "beta: 7"]
    flat.write_text("".join(f"{line}\n" for line in body))
    nested = tmp_path / "nested.yaml"  # the same under `kernel:`, next to other settings
    nested.write_text("kernel:\n" + "".join(f"  {line}\n" for line in body) + "seed: 1\n")
    want = PRESETS["paper-sfa"].replace(
        block_n=None, beta=7, row_sum_floor=None, masked_tiles="skip"
    )
    assert spec_from_yaml(flat) == spec_from_yaml(str(nested)) == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kernel: [unclosed\n", "malformed YAML in .* \\(line \\d+\\)"),
        ("- a\n- b\n", "expected a mapping"),
        ("colour: red\n", "unknown kernel spec field 'colour'"),
        ("block_n: 48\n", "block_n must be a power of two"),
    ],
)
def test_bad_yaml_is_one_line_error(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(text)
    with pytest.raises(FlashprobeError, match=message) as err:
        spec_from_yaml(path)
    assert "\n" not in str(err.value)


def test_missing_yaml_file(tmp_path) -> None:
    with pytest.raises(FlashprobeError, match="spec file not found"):
        spec_from_yaml(tmp_path / "absent.yaml")


# -- validation ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"colour": "red"}, "unknown kernel spec field 'colour'; known fields: block_m"),
        ({"block_n": 48}, "block_n must be a power of two between 16 and 65536"),
        ({"block_n": 8}, "block_n must be a power of two"),
        ({"block_m": 1 << 17}, "block_m must be a power of two"),
        ({"block_n": True}, "block_n must be a power of two or 'full'"),
        ({"block_n": 32.0}, "block_n must be a power of two or 'full'"),
        ({"block_n": "wide"}, "block_n must be a power of two or 'full'"),
        ({"softmax": "sfa"}, "softmax must be one of standard, stabilized, fused_scale"),
        ({"score_precision": "fp16"}, "score_precision must be one of bf16, fp32"),
        ({"accumulator": "fp64"}, "accumulator must be one of"),
        ({"l_accumulator": "fp16"}, "l_accumulator must be null or one of bf16, fp32"),
        ({"delta_source": "o"}, "delta_source must be one of o_lowp, o_fp32, o_recompute, dp_p"),
        ({"beta": 1.0}, "beta must be a finite number > 1"),
        ({"beta": math.inf}, "beta must be a finite number > 1"),
        ({"beta": "2"}, "beta must be a number"),
        ({"beta": True}, "beta must be a number"),
        ({"tie_tolerance": -1e-3}, "tie_tolerance must be a finite number >= 0"),
        ({"tie_tolerance": math.nan}, "tie_tolerance must be a finite number >= 0"),
        ({"l_from_rounded_p": "yes"}, "l_from_rounded_p must be true or false"),
        ({"l_from_rounded_p": 1}, "l_from_rounded_p must be true or false"),
        (
            {"softmax": "fused_scale", "score_precision": "bf16"},
            "fused_scale.*needs score_precision 'fp32'",
        ),
    ],
)
def test_impossible_values_are_one_line_errors(overrides: dict, message: str) -> None:
    with pytest.raises(FlashprobeError, match=message) as err:
        make_spec("fa2", overrides)
    assert "\n" not in str(err.value)


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(FlashprobeError, match="block_n"):
        KernelSpec(block_n=48)
    with pytest.raises(FlashprobeError, match="beta"):
        KernelSpec(beta=0.5)


@pytest.mark.parametrize("base", [42, 3.5, ["fa2"]])
def test_bad_base(base: object) -> None:
    with pytest.raises(FlashprobeError, match="kernel spec must be a preset name or a mapping"):
        make_spec(base)  # type: ignore[arg-type]


def test_mixed_key_types_name_the_unknown_field() -> None:
    """A mapping with a non-string key (YAML `1: x`, a Python dict) is an unknown field, not
    a TypeError from sorting str against int."""
    with pytest.raises(FlashprobeError, match="unknown kernel spec field 1;"):
        make_spec({1: 2, "colour": "red"})
    with pytest.raises(FlashprobeError, match="unknown kernel spec field 1;"):
        make_spec("fa2", {1: 2, "beta": 4})


@pytest.mark.parametrize("overrides", [["beta"], "beta=4", 4])
def test_overrides_must_be_a_mapping(overrides: object) -> None:
    with pytest.raises(FlashprobeError, match="overrides must be a mapping of fields"):
        make_spec("fa2", overrides)  # type: ignore[arg-type]


def test_unknown_preset() -> None:
    with pytest.raises(FlashprobeError, match="unknown preset 'fa3'; choose one of: fa2"):
        make_spec("fa3")
    with pytest.raises(FlashprobeError, match="unknown preset"):
        make_spec({"preset": "fa3"})


# -- frozen and hashable --------------------------------------------------------------------------
def test_frozen_hashable_and_keyed() -> None:
    spec = PRESETS["fa2"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.block_n = 32  # type: ignore[misc]
    same = make_spec({"preset": "sfa", "softmax": "standard"})
    assert same == spec and hash(same) == hash(spec) and same.key() == spec.key()
    assert {spec: 1}[same] == 1
    keys = {p.key() for p in PRESETS.values()}
    assert len(keys) == len(PRESETS)
    assert all(len(k) == 12 and int(k, 16) >= 0 for k in keys)
    assert spec.replace(beta=3).key() != spec.key()  # every field counts, even inert ones
    assert spec.to_dict()["block_n"] == 64
    # a field added later is left out while off, so older specs keep their JSON and key
    later = {"row_sum_floor", "masked_tiles", "row_sum_bias"}
    assert set(spec.to_dict()) == set(FIELD_NAMES) - later
    assert set(PRESETS["paper-sfa"].to_dict()) == set(FIELD_NAMES) - {"row_sum_bias"}


def test_presets_without_a_row_sum_floor_keep_their_stored_keys() -> None:
    # the keys results were stored under before row_sum_floor existed
    stored = {"fa2": "568357ff1a14", "paper-code": "f646f4f1cd40", "sfa": "fe05aab2867d",
              "fp32": "7794dd0ddb47"}  # fmt: skip
    assert {name: PRESETS[name].key() for name in stored} == stored
    paper_sfa = PRESETS["paper-sfa"]
    before_floor = paper_sfa.replace(row_sum_floor=None, masked_tiles="skip")
    assert paper_sfa.key() != paper_sfa.replace(masked_tiles="skip").key() != before_floor.key()
    assert before_floor.key() == "1e986cc3e411"  # paper-sfa before both fields
    # a dict without the field (a stored config) rebuilds the spec with the floor off
    assert KernelSpec(**PRESETS["fa2"].to_dict()) == PRESETS["fa2"]
    assert KernelSpec(**paper_sfa.to_dict()) == paper_sfa


@pytest.mark.parametrize(
    ("value", "want"), [(1e-10, 1e-10), (1, 1.0), (None, None), ("null", None)]
)
def test_row_sum_floor_values(value, want) -> None:
    assert make_spec("paper-code", {"row_sum_floor": value}).row_sum_floor == want
    set_on_cli = parse_assignments(["row_sum_floor=1e-8"])
    assert make_spec("paper-code", set_on_cli).row_sum_floor == 1e-8


@pytest.mark.parametrize("value", [0, -1e-10, math.inf, math.nan, True, "small", [1e-10]])
def test_bad_row_sum_floor_is_one_line_error(value) -> None:
    with pytest.raises(FlashprobeError, match="row_sum_floor"):
        make_spec("paper-sfa", {"row_sum_floor": value})


def test_row_sum_bias_values() -> None:
    assert make_spec("fa2", parse_assignments(["row_sum_bias=2e-4"])).row_sum_bias == 2e-4
    assert make_spec("fa2", {"row_sum_bias": -0.01}).row_sum_bias == -0.01
    assert make_spec("fa2", {"row_sum_bias": 2e-4}).describe() == "fa2+row_sum_bias=0.0002"
    for value in (0.1, -0.5, math.inf, math.nan, True, "big", None):
        with pytest.raises(FlashprobeError, match="row_sum_bias must be"):
            make_spec("fa2", {"row_sum_bias": value})


def test_masked_tiles_values() -> None:
    assert make_spec("fa2", parse_assignments(["masked_tiles=release"])).masked_tiles == "release"
    assert make_spec("paper-sfa", {"masked_tiles": "skip"}).masked_tiles == "skip"
    assert "masked_tiles" in PRESETS["paper-sfa"].to_dict()
    for value in ("all", None, True):
        with pytest.raises(FlashprobeError, match="masked_tiles must be one of skip, release"):
            make_spec("paper-sfa", {"masked_tiles": value})


def test_l_accumulator_follows_the_accumulator_unless_set() -> None:
    paper = PRESETS["paper-code"]
    assert paper.l_accumulator is None and paper.l_precision == "bf16"
    assert paper.replace(accumulator="fp32").l_precision == "fp32"  # acc-fp32: O and ℓ
    split = paper.replace(l_accumulator="fp32")
    assert (split.accumulator, split.l_precision) == ("bf16", "fp32")
    assert split.describe() == "paper-code+l_accumulator=fp32"
    assert split.replace(l_accumulator=None) == paper


def test_describe_against_an_explicit_base() -> None:
    spec = PRESETS["paper-code"].replace(block_n=64)
    assert spec.describe("paper-code") == "paper-code+block_n=64"
    assert spec.describe(PRESETS["paper-code"]) == "spec+block_n=64"
    assert PRESETS["fa2"].replace(tie_tolerance=0.0).describe() == "fa2+tie_tolerance=0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fa2", ("fa2", {})),
        (" paper-code:beta=4, block_n=full ", ("paper-code", {"beta": 4, "block_n": "full"})),
        ("exact:ties=3", ("exact", {"ties": 3})),
    ],
)
def test_split_variant_reads_preset_and_fields(text: str, expected: tuple) -> None:
    assert split_variant(text) == expected


@pytest.mark.parametrize(
    ("text", "presets", "needle"),
    [
        ("fa2:", None, "nothing after ':'"),
        ("fa2:beta=3,beta=4", None, "given twice"),
        ("fa2:beta=4,,block_n=16", None, "empty KEY=VALUE"),
        ("fa2:block_n=16,", None, "empty KEY=VALUE"),
        ("fa2:beta", None, "key=value"),
        ("fa2:beta", PRESETS, "key=value"),
        # the preset first: `nope:ties` names the unknown preset, the likelier slip
        ("nope:ties", PRESETS, "unknown preset 'nope'"),
        (":beta=4", PRESETS, "expected PRESET"),
    ],
)
def test_split_variant_refuses_malformed_strings(text: str, presets, needle: str) -> None:
    with pytest.raises(FlashprobeError, match=needle):
        split_variant(text, presets)
