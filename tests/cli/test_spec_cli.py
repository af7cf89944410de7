from __future__ import annotations

import json

import pytest


def test_spec_json_applies_overrides(run_cli) -> None:
    result = run_cli(
        "spec", "fa2", "--set", "softmax=stabilized", "--set", "beta=4", "--format", "json"
    )
    assert result.code == 0
    data = json.loads(result.out)
    assert data["softmax"] == "stabilized"
    assert data["beta"] == 4.0
    assert data["label"] == "sfa+beta=4"


def test_spec_from_yaml(run_cli, tmp_path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("kernel:\n  preset: paper-code\n  block_n: full\n")
    result = run_cli("spec", "--config", str(path), "--format", "json")
    assert result.code == 0
    data = json.loads(result.out)
    assert data["block_n"] is None and data["accumulator"] == "bf16"


def test_spec_preset_argument_starts_the_config_fields(run_cli, tmp_path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("beta: 4\n")
    result = run_cli("spec", "sfa", "--config", str(path), "--format", "json")
    assert result.code == 0
    data = json.loads(result.out)
    assert (data["softmax"], data["beta"], data["label"]) == ("stabilized", 4.0, "sfa+beta=4")


def test_spec_refuses_two_different_presets(run_cli, tmp_path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("preset: sfa\nbeta: 4\n")
    result = run_cli("spec", "paper-code", "--config", str(path))
    assert result.code == 2
    assert "give one" in result.err and len(result.err.strip().splitlines()) == 1
    assert run_cli("spec", "sfa", "--config", str(path)).code == 0  # the same preset twice


def test_spec_takes_fields_after_the_preset_as_bias_variants_do(run_cli) -> None:
    """`spec paper-code:accumulator=fp32,block_n=full` is the spec `bias --variant` measures
    under that string; --set still overrides."""
    result = run_cli("spec", "paper-code:accumulator=fp32,block_n=full", "--format", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert (data["accumulator"], data["block_n"], data["score_precision"]) == ("fp32", None, "bf16")
    both = run_cli("spec", "fa2:softmax=stabilized,beta=3", "--set", "beta=5", "--format", "json")
    assert both.code == 0 and json.loads(both.out)["beta"] == 5.0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["spec", "nope"], "unknown preset"),
        (["spec", "nope:beta=4"], "unknown preset 'nope'"),
        (["spec", "paper-code:"], "nothing after ':'"),
        (["spec", "paper-code:beta=3,beta=4"], "given twice"),
        (["spec", "paper-code:colour=red"], "colour"),
        (["spec", "--set", "beta=0.5"], "beta"),
        (["spec", "--set", "colour=red"], "colour"),
        (["spec", "--set", "block_n=48"], "block_n"),
        (["spec", "--config", "/no/such/file.yaml"], "not found"),
        (["spec", "--format", "xml"], "--format"),
    ],
)
def test_bad_input_is_one_line_exit_2(run_cli, args: list[str], needle: str) -> None:
    result = run_cli(*args)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("beta: 4\nkernel: {beta: 2}\n", "both under kernel: and beside it (beta)"),
        ("preset: sfa\nseed: 1\nkernel: {beta: 4}\n", "beside it (preset): give them in one"),
        ("kernel: [1, 2]\n", "kernel: must be a mapping of kernel spec fields, got [1, 2]"),
        ("kernel: null\n", "kernel: must be a mapping of kernel spec fields, got None"),
    ],
)
def test_a_kernel_key_holds_every_field_and_a_mapping(run_cli, tmp_path, text, needle):
    """A field beside `kernel:` would silently lose to it (other settings may stand there)."""
    path = tmp_path / "k.yaml"
    path.write_text(text)
    result = run_cli("spec", "--config", str(path))
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines


def test_malformed_yaml_is_one_line(run_cli, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kernel: [unclosed\n")
    result = run_cli("spec", "--config", str(path))
    assert result.code == 2
    assert "malformed YAML" in result.err and len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize("preset", ["fa2", "paper-code", "sfa", "paper-sfa", "fp32"])
def test_spec_table_values_can_be_typed_back(run_cli, preset: str) -> None:
    from flashprobe.spec import FIELD_NAMES, make_spec, parse_assignments

    result = run_cli("spec", preset)
    assert result.code == 0
    lines = result.out.splitlines()
    shown = {}
    for line in lines[3:]:  # label line, header, rule
        field, value = line.split()[:2]
        if field in FIELD_NAMES:
            shown[field] = value
    assert set(shown) == set(FIELD_NAMES)
    again = run_cli("spec", "fa2", *(a for k, v in shown.items() for a in ("--set", f"{k}={v}")))
    assert again.code == 0, again.err
    typed = parse_assignments(f"{k}={v}" for k, v in shown.items())
    assert make_spec("fa2", typed) == make_spec(preset)
    assert again.out.splitlines()[0].split()[-1] == lines[0].split()[-1]  # same key


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_presets_listing_follows_format(run_cli, fmt: str) -> None:
    import yaml

    from flashprobe.spec import PRESET_DOCS, PRESETS

    result = run_cli("spec", "--presets", "--format", fmt)
    assert result.code == 0, result.err
    data = json.loads(result.out) if fmt == "json" else yaml.safe_load(result.out)
    assert data == {name: PRESET_DOCS[name] for name in PRESETS}
    assert list(data) == list(PRESETS)


def test_presets_listing_refuses_a_bad_format(run_cli) -> None:
    result = run_cli("spec", "--presets", "--format", "xml")
    assert result.code == 2
    assert "--format" in result.err and len(result.err.strip().splitlines()) == 1
