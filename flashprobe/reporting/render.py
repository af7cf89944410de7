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
import textwrap
from collections.abc import Collection, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashprobe.errors import FlashprobeError

FORMATS = ("table", "json", "csv")
WIDTH = 100  # default terminal width of text tables
GAP = 2  # spaces between columns in tabulate's "simple" format
HEADER_PAD = 2  # tabulate pads every header by 2 (MIN_PADDING)
WRAP_MIN = 24  # a wrapped text column is never narrower than this


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


def fit_table(
    body: Sequence[Sequence[str]],
    headers: Sequence[str],
    *,
    keep: int = 1,
    width: int = WIDTH,
    wrap: Collection[int] = (),
) -> str:
    """A text table at most `width` characters wide where it can be: the columns in `wrap`
    (indices) are wrapped, and what still does not fit is split into several tables, each
    repeating the first `keep` (key) columns."""
    n = len(headers)
    natural = [
        max([len(headers[i]) + HEADER_PAD] + [len(x) for row in body for x in row[i].splitlines()])
        for i in range(n)
    ]
    least = [min(natural[i], WRAP_MIN) if i in wrap else natural[i] for i in range(n)]
    keys = list(range(min(keep, n)))
    key_width = sum(least[i] + GAP for i in keys)
    groups: list[list[int]] = []
    for i in range(len(keys), n):
        used = key_width + sum(least[j] + GAP for j in groups[-1]) if groups else 0
        if not groups or used + least[i] > width:
            groups.append([])
        groups[-1].append(i)
    tables = []
    for group in groups or [[]]:
        cols = keys + group
        spare = width - sum(least[i] for i in cols) - GAP * (len(cols) - 1)
        limits: list[int | None] = []
        for i in cols:
            if i in wrap and natural[i] > least[i]:
                extra = max(0, min(natural[i] - least[i], spare))
                spare -= extra
                limits.append(least[i] + extra)
            else:
                limits.append(None)
        rows = [[row[i] for i in cols] for row in body]
        names = [headers[i] for i in cols]
        tables.append(
            tabulate(rows, headers=names, disable_numparse=True, maxcolwidths=limits or None)
            if rows
            else tabulate([], headers=names)
        )
    return "\n\n".join(tables)


def fill(text: str, width: int | None = WIDTH, indent: str = "") -> str:
    """Wrap prose at `width` (None: one line), continuing lines under `indent`."""
    if width is None:
        return text
    return textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False)


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
