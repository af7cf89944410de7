"""Generic rendering of result rows as a table, JSON or CSV (shared by the commands).

Commands build a list of flat dicts (one per row) and, for JSON, one nested object; these
helpers only format. Floats in tables use a compact general format; JSON keeps full precision
and turns NaN/inf (not valid JSON) into null.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashprobe.errors import FlashprobeError

FORMATS = ("table", "json", "csv")


def check_format(fmt: str, allowed: Sequence[str] = FORMATS) -> str:
    """Validate a --format value early (before any work) and return it."""
    if fmt not in allowed:
        raise FlashprobeError(f"--format must be one of {', '.join(allowed)}, got {fmt!r}")
    return fmt


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, mappings, sequences, paths, enums and scalars → plain JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_dict = getattr(obj, "to_dict", None)
        data = to_dict() if callable(to_dict) else dataclasses.asdict(obj)
        return to_jsonable(data)
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, bool | int | str) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Enum):
        return to_jsonable(obj.value)
    item = getattr(obj, "item", None)  # numpy / torch scalars
    if callable(item):
        return to_jsonable(item())
    return str(obj)


def render_json(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), indent=2, allow_nan=False)


def render_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
    headers: Mapping[str, str] | None = None,
    floatfmt: str = ".3g",
    widths: Mapping[str, int] | None = None,
) -> str:
    """A plain-text table; `headers` maps column keys to display names, `widths` wraps the
    text of a column at that many characters."""
    columns = list(columns or (rows[0].keys() if rows else []))
    names = [(headers or {}).get(c, c) for c in columns]
    body = [[_cell(row.get(c), floatfmt) for c in columns] for row in rows]
    wrap = [(widths or {}).get(c) for c in columns] if rows else None
    return tabulate(body, headers=names, disable_numparse=True, maxcolwidths=wrap)


def render_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """CSV with full-precision numbers (repr of floats), one header line."""
    columns = list(columns or (rows[0].keys() if rows else []))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_cell(row.get(c)) for c in columns])
    return out.getvalue().rstrip("\n")


def render(
    fmt: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    document: Any = None,
    columns: Sequence[str] | None = None,
    headers: Mapping[str, str] | None = None,
    floatfmt: str = ".3g",
    widths: Mapping[str, int] | None = None,
) -> str:
    """Render rows as a table or CSV, or `document` (default: the rows) as JSON."""
    check_format(fmt)
    if fmt == "json":
        return render_json(rows if document is None else document)
    if fmt == "csv":
        return render_csv(rows, columns)
    return render_table(rows, columns, headers, floatfmt, widths)


def _cell(value: Any, floatfmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format(value, floatfmt) if math.isfinite(value) else str(value)
    return str(value)


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)
