"""The result store: one directory per suite cell, keyed by the cell's content hash.

    STORE/<suite>/<variant>--<key>/
        cell.json          suite, variant, grid point, seed, branch, key, code version
        config.json        the resolved run config
        environment.json   GPU, driver, torch, triton, git SHA (flashprobe.environment)
        metrics.jsonl      written by training, one JSON object per line
        checkpoints/       written by training
        captures/          safetensors tensor captures
        summary.json       written last: its presence marks the cell finished

Everything is written through temp-file-and-rename, so a killed run leaves either the old file
or the new one, never half of one. A finished cell (summary.json present) is skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.experiments.suite import Cell, cell_key
from flashprobe.reporting.atomic import write_text_atomic

SUMMARY = "summary.json"


@dataclass(frozen=True)
class CellRecord:
    """A cell as found on disk."""

    path: Path
    meta: Mapping[str, Any]
    config: Mapping[str, Any]
    summary: Mapping[str, Any] | None

    @property
    def finished(self) -> bool:
        return self.summary is not None


class ResultStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def cell_dir(self, cell: Cell, code_version: str) -> Path:
        safe_variant = re.sub(r"[^A-Za-z0-9_.-]+", "_", cell.variant)
        return self.root / cell.suite / f"{safe_variant}--{cell_key(cell, code_version)}"

    def is_finished(self, cell: Cell, code_version: str) -> bool:
        return (self.cell_dir(cell, code_version) / SUMMARY).is_file()

    def open_cell(self, cell: Cell, code_version: str, environment: Mapping[str, Any]) -> Path:
        """Create (or reuse) a cell's directory and write its header files."""
        path = self.cell_dir(cell, code_version)
        path.mkdir(parents=True, exist_ok=True)
        meta = {
            "suite": cell.suite,
            "variant": cell.variant,
            "point": [list(p) for p in cell.point],
            "seed": cell.seed,
            "branch_from": cell.branch_from,
            "branch_step": cell.branch_step,
            "key": cell_key(cell, code_version),
            "code_version": code_version,
        }
        write_json(path / "cell.json", meta)
        write_json(path / "config.json", cell.config)
        write_json(path / "environment.json", environment)
        return path

    def finish(self, path: Path, summary: Mapping[str, Any]) -> None:
        write_json(path / SUMMARY, summary)

    def records(self, suite: str | None = None) -> Iterator[CellRecord]:
        """Every cell directory under the store (or one suite), finished or not."""
        if not self.root.is_dir():
            raise FlashprobeError(f"result store not found: {self.root}")
        suites = [self.root / suite] if suite else sorted(p for p in self.root.iterdir())
        for suite_dir in suites:
            if not suite_dir.is_dir():
                continue
            for cell_dir in sorted(p for p in suite_dir.iterdir() if p.is_dir()):
                if (cell_dir / "cell.json").is_file():
                    yield self._read(cell_dir)

    def _read(self, path: Path) -> CellRecord:
        summary_path = path / SUMMARY
        return CellRecord(
            path=path,
            meta=read_json(path / "cell.json"),
            config=read_json(path / "config.json"),
            summary=read_json(summary_path) if summary_path.is_file() else None,
        )


def write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FlashprobeError(f"missing file in result store: {path}") from None
    except json.JSONDecodeError as exc:
        raise FlashprobeError(f"corrupt JSON in result store: {path} (line {exc.lineno})") from None
