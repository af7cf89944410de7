"""Reading YAML files users write: safe loading, and one-line errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from flashprobe.errors import FlashprobeError


def read_yaml(path: str | Path, what: str) -> Any:
    """The parsed content of `path` (safe_load: no code runs); `what` names it in errors."""
    path = Path(path)
    if not path.is_file():
        raise FlashprobeError(f"{what} file not found: {path}")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise FlashprobeError(f"malformed YAML in {path}{where}") from None
