"""Strict JSON for every file flashprobe writes: a NaN or infinity is stored as null plus a flag.

json.dumps writes NaN and Infinity by default, which strict parsers (jq, JavaScript, most
languages' standard JSON) refuse. A diverged run has NaN losses, so the writers here store every
non-finite float as null and list it under the top-level key NONFINITE as a JSON pointer
(RFC 6901) to the value: {"final_loss": null, "_nonfinite": {"/final_loss": "NaN"}}. `loads`
puts the values back (and still reads files written before, with bare NaN tokens).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError

NONFINITE = "_nonfinite"
_NAMES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def dumps(
    data: Any,
    *,
    indent: int | None = None,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> str:
    """Strict JSON text of `data`: non-finite floats as null, flagged when `data` is a mapping."""
    flags: dict[str, str] = {}
    clean = _replace_nonfinite(data, "", flags)
    if flags and isinstance(clean, dict):
        clean[NONFINITE] = flags
    return json.dumps(clean, indent=indent, sort_keys=sort_keys, default=default, allow_nan=False)


def loads(text: str) -> Any:
    """Parse JSON written by `dumps` (non-finite values restored) or by older code (NaN tokens)."""
    data = json.loads(text)
    if isinstance(data, dict) and isinstance(data.get(NONFINITE), dict):
        flags = data.pop(NONFINITE)
        for pointer, name in flags.items():
            if isinstance(pointer, str) and isinstance(name, str) and name in _NAMES:
                _set_pointer(data, pointer, _NAMES[name])
    return data


def read_json_file(path: Path, what: str) -> Any:
    """The JSON value in `path` as json.loads reads it; a one-line FlashprobeError naming `what`
    (e.g. "digest", "bench file") and the file where it is missing, a folder, not text or not
    JSON."""
    if path.is_dir():
        raise FlashprobeError(f"{path} is a folder, not a {what}")
    if not path.is_file():
        raise FlashprobeError(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise FlashprobeError(f"{what} is not text (UTF-8 JSON): {path}") from None
    except json.JSONDecodeError as exc:
        raise FlashprobeError(f"{what} is not JSON: {path} (line {exc.lineno})") from None
    except OSError as exc:
        raise FlashprobeError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _replace_nonfinite(value: Any, pointer: str, flags: dict[str, str]) -> Any:
    if not isinstance(value, str | int | float | Mapping | list | tuple) and value is not None:
        item = getattr(value, "item", None)  # numpy and torch scalars
        if callable(item):
            value = item()
    if isinstance(value, float) and not math.isfinite(value):
        flags[pointer] = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return None
    if isinstance(value, Mapping):
        return {
            key: _replace_nonfinite(item, f"{pointer}/{_escape(str(key))}", flags)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_replace_nonfinite(item, f"{pointer}/{i}", flags) for i, item in enumerate(value)]
    return value


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _set_pointer(data: Any, pointer: str, value: float) -> None:
    """Set the value a JSON pointer names, if it names a null that is there (else: ignore)."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    node = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, dict) and part in node:
            if last:
                if node[part] is None:
                    node[part] = value
                return
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            if last:
                if node[int(part)] is None:
                    node[int(part)] = value
                return
            node = node[int(part)]
        else:
            return


def has_type(value: Any, types: tuple[type, ...]) -> bool:
    """`value` is one of `types` as JSON means it: true and false are no numbers."""
    return isinstance(value, types) and (not isinstance(value, bool) or bool in types)
