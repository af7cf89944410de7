import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.yaml_io import load_yaml, read_yaml


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e-3", 1e-3), ("-4E+2", -400.0), ("1.5e3", 1500.0), ("2", 2), ("e3", "e3"), ("1e", "1e")],
)
def test_exponent_floats_are_numbers(text: str, value: object) -> None:
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
