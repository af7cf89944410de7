"""Mapping → frozen dataclass, checked: the machinery every flashprobe config class uses.

YAML gives plain mappings; `build_config` makes the dataclass (unknown keys refused, naming the
key), `check_fields` checks and normalises its annotated fields in `__post_init__`, `require`
states the class's own rules. Every error is a one-line `FlashprobeError` naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from flashprobe.errors import FlashprobeError

C = TypeVar("C")


def build_config(cls: type[C], data: Any, section: str) -> C:
    """An instance of the config dataclass `cls` from a mapping (or an instance, or None)."""
    if data is None:
        return cls()
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise FlashprobeError(f"{section} must be a mapping, got {short_repr(data)}")
    known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    for key in data:
        if key not in known:
            raise FlashprobeError(f"unknown key {section}.{key}; known keys: {', '.join(known)}")
    return cls(**data)


def check_fields(obj: Any, section: str) -> None:
    """Check and normalise every annotated field of a frozen dataclass in place.

    Handles bool, int, float (ints accepted), str, Literal, `X | None` and `tuple[X, ...]`
    (lists accepted); other annotations are left to the class's own checks.
    """
    hints = typing.get_type_hints(type(obj))
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        fixed = _coerce(hints[field.name], value, f"{section}.{field.name}")
        if fixed is not value:
            object.__setattr__(obj, field.name, fixed)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _coerce(inner[0], value, where)
        return value
    if origin is Literal:
        if value not in args:
            raise FlashprobeError(
                f"{where} must be one of {', '.join(map(str, args))}, got {short_repr(value)}"
            )
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise FlashprobeError(f"{where} must be a list, got {short_repr(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v, where) for v in value)
        if len(value) != len(args):
            raise FlashprobeError(f"{where} must have {len(args)} entries, got {short_repr(value)}")
        return tuple(_coerce(a, v, where) for a, v in zip(args, value, strict=True))
    if hint is bool:
        if not isinstance(value, bool):
            raise FlashprobeError(f"{where} must be true or false, got {short_repr(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FlashprobeError(f"{where} must be an integer, got {short_repr(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FlashprobeError(f"{where} must be a number, got {short_repr(value)}")
        if not math.isfinite(value):
            raise FlashprobeError(f"{where} must be finite, got {value}")
        return float(value) if isinstance(value, int) else value
    if hint is str:
        if not isinstance(value, str):
            raise FlashprobeError(f"{where} must be a string, got {short_repr(value)}")
        return value
    return value


def short_repr(value: Any) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def require(condition: bool, message: str) -> None:
    if not condition:
        raise FlashprobeError(message)


def config_to_dict(obj: Any) -> Any:
    """Plain JSON/YAML-ready data from a config: objects with to_dict (a KernelSpec) give theirs,
    dataclasses their fields, sequences lists."""
    if hasattr(obj, "to_dict") and not isinstance(obj, type):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: config_to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [config_to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: config_to_dict(v) for k, v in obj.items()}
    return obj
