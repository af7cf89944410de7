import os

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.yaml_io import MAX_BYTES, load_yaml, read_yaml


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e-3", 1e-3), ("-4E+2", -400.0), ("1.5e3", 1500.0), ("2", 2), ("e3", "e3"), ("1e", "1e")],
)
def test_exponent_floats_are_numbers(text: str, value: object) -> None:
    loaded = load_yaml(f"x: {text}")["x"]
    assert loaded == value and type(loaded) is type(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4:5", "4:5"),  # YAML 1.1: 245, base 60
        ("1:0", "1:0"),
        ("020", 20),  # YAML 1.1: 16, octal
        ("0x10", 16),
        ("0o17", 15),
        ("1_000", 1000),
        ("yes", "yes"),  # YAML 1.1: true
        ("on", "on"),
        ("off", "off"),
        ("True", True),
        ("false", False),
        (".5", 0.5),
        ("-.inf", float("-inf")),
        ("1.0.0", "1.0.0"),
    ],
)
def test_booleans_and_numbers_follow_yaml_1_2(text: str, value: object) -> None:
    """A value that YAML 1.1 would turn into another number or a boolean stays what it says,
    so a field's check refuses it instead of taking a silent 245 or true."""
    loaded = load_yaml(f"x: {text}")["x"]
    assert loaded == value and type(loaded) is type(value)


def test_loader_is_safe() -> None:
    with pytest.raises(Exception, match="could not determine a constructor"):
        load_yaml("x: !!python/object/apply:os.system ['true']")


def test_read_yaml_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(FlashprobeError, match="suite file not found"):
        read_yaml(tmp_path / "missing.yaml", "suite")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(FlashprobeError, match=r"malformed YAML in .*bad.yaml \(line"):
        read_yaml(bad, "suite")


def test_a_repeated_key_is_refused_naming_the_key_and_line(tmp_path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text("name: a\nseeds: [0]\nbase:\n  train: {steps: 1}\nseeds: [1]\n")
    with pytest.raises(FlashprobeError, match=r"suite.yaml: duplicate key 'seeds' \(line 5\)"):
        read_yaml(path, "suite")
    with pytest.raises(FlashprobeError, match="duplicate key 'lr'"):
        load_yaml("optimizer: {lr: 1, lr: 2}")


def test_merge_keys_may_override_what_they_merge() -> None:
    text = "base: &b {x: 1, y: 2}\nother: {<<: *b, x: 3}\nmore: {<<: *b, y: 4}\n"
    assert load_yaml(text) == {
        "base": {"x": 1, "y": 2},
        "other": {"x": 3, "y": 2},
        "more": {"x": 1, "y": 4},
    }


def test_an_alias_bomb_is_refused_before_it_expands() -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):  # 9**9 strings once expanded
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append("description: *a8")
    with pytest.raises(FlashprobeError, match="expands to more than"):
        load_yaml("\n".join(lines))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("&a [*a]", "refers to itself"),
        ("[" * 100 + "]" * 100, "nested deeper"),
        ("[" * 1500 + "]" * 1500, "nested"),
        ("x: " + "y" * (MAX_BYTES + 1), "too large"),
    ],
)
def test_documents_over_the_limits_are_refused(text: str, message: str) -> None:
    with pytest.raises(FlashprobeError, match=message):
        load_yaml(text)


def test_shared_anchors_within_the_limits_load() -> None:
    text = "k: &k {preset: fa2}\n" + "".join(f"v{i}: {{kernel: *k}}\n" for i in range(200))
    assert load_yaml(text)["v199"] == {"kernel": {"preset": "fa2"}}


def test_unreadable_binary_and_folder_inputs_are_one_line_errors(tmp_path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(FlashprobeError, match="not UTF-8 text"):
        read_yaml(binary, "suite")
    with pytest.raises(FlashprobeError, match="is a folder"):
        read_yaml(tmp_path, "suite")
    large = tmp_path / "large.yaml"
    large.write_bytes(b"#" * (MAX_BYTES + 10))
    with pytest.raises(FlashprobeError, match="larger than"):
        read_yaml(large, "suite")
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.yaml"
        locked.write_text("name: x\n")
        locked.chmod(0)
        with pytest.raises(FlashprobeError, match="cannot read suite file"):
            read_yaml(locked, "suite")
