"""Reading YAML users write: safe loading, YAML 1.2 numbers, one-line errors naming the file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from flashprobe.errors import FlashprobeError


class SafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that also reads `1e-3` and `4E+2` as floats.

    PyYAML follows YAML 1.1, whose float pattern needs a dot (`1.0e-3`), so `lr: 1e-3` would
    arrive as the string '1e-3'; YAML 1.2 (and every user) reads it as a number.
    """


SafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    """Parse YAML text safely (no code runs), with YAML 1.2 floats."""
    return yaml.load(text, Loader=SafeLoader)


def read_yaml(path: str | Path, what: str) -> Any:
    """The parsed content of `path` (safe_load: no code runs); `what` names it in errors."""
    path = Path(path)
    if not path.is_file():
        raise FlashprobeError(f"{what} file not found: {path}")
    try:
        return load_yaml(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise FlashprobeError(f"malformed YAML in {path}{where}") from None
