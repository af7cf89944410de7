"""Mapping → frozen dataclass: unknown keys, types, Literals, optional and tuple fields."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest

from flashprobe.config_tools import build_config, check_fields, config_to_dict, require
from flashprobe.errors import FlashprobeError
from flashprobe.spec import make_spec


@dataclasses.dataclass(frozen=True)
class Inner:
    name: str = "x"

    def __post_init__(self) -> None:
        check_fields(self, "demo.inner")


@dataclasses.dataclass(frozen=True)
class Demo:
    steps: int = 10
    lr: float = 1e-3
    kind: Literal["cosine", "constant"] = "cosine"
    limit: int | None = None
    betas: tuple[float, ...] = (0.9, 0.95)
    pair: tuple[int, str] = (1, "a")
    flag: bool = False
    inner: Inner = dataclasses.field(default_factory=Inner)

    def __post_init__(self) -> None:
        check_fields(self, "demo")
        require(self.steps >= 1, f"demo.steps must be >= 1, got {self.steps}")


def test_a_mapping_becomes_the_checked_dataclass() -> None:
    demo = build_config(Demo, {"steps": 5, "lr": 2, "betas": [0.8, 0.9], "limit": None}, "demo")
    assert demo == Demo(steps=5, lr=2.0, betas=(0.8, 0.9))
    assert isinstance(demo.lr, float) and isinstance(demo.betas, tuple)  # normalised in place
    assert build_config(Demo, None, "demo") == Demo()
    assert build_config(Demo, demo, "demo") is demo


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"step": 5}, "unknown key demo.step; known keys: steps, lr, kind, limit, betas, pair, "),
        ({"steps": "5"}, "demo.steps must be an integer, got '5'"),
        ({"steps": True}, "demo.steps must be an integer, got True"),
        ({"lr": float("nan")}, "demo.lr must be finite, got nan"),
        ({"lr": "fast"}, "demo.lr must be a number, got 'fast'"),
        ({"kind": "linear"}, "demo.kind must be one of cosine, constant, got 'linear'"),
        ({"limit": 1.5}, "demo.limit must be an integer, got 1.5"),
        ({"betas": 0.9}, "demo.betas must be a list, got 0.9"),
        ({"pair": [1]}, "demo.pair must have 2 entries, got [1]"),
        ({"flag": "yes"}, "demo.flag must be true or false, got 'yes'"),
        ({"steps": 0}, "demo.steps must be >= 1, got 0"),
        ({"steps": list(range(40))}, "demo.steps must be an integer, got [0, 1, 2, 3, 4, 5, 6, 7,"),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_key(data, message: str) -> None:
    with pytest.raises(FlashprobeError) as err:
        build_config(Demo, data, "demo")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert len(str(err.value)) < 200  # long values are cut short
    with pytest.raises(FlashprobeError, match="demo must be a mapping, got 3"):
        build_config(Demo, 3, "demo")


def test_config_to_dict_gives_plain_data() -> None:
    spec = make_spec("sfa")
    data = config_to_dict({"a": Demo(), "spec": spec, "list": (Inner("y"),)})
    assert data["a"]["betas"] == [0.9, 0.95] and data["a"]["inner"] == {"name": "x"}
    assert data["spec"] == spec.to_dict() and data["list"] == [{"name": "y"}]
