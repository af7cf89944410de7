"""Per-step metrics: spectral norms of W_Q / W_K, and the JSONL log they are written to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from flashprobe import json_io
from flashprobe.model.gpt import GPT
from flashprobe.reporting.atomic import write_text_atomic
from flashprobe.reporting.render import to_jsonable


@torch.no_grad()
def qk_spectral_norms(model: GPT) -> dict[str, list[Any]]:
    """Largest singular values of W_Q and W_K: per layer, and per layer and head.

    A head's block is its head_dim output rows of the matrix (the rows that produce that
    head's q or k), as in the paper's Fig. 3; W_K has one block per key/value head.
    """
    head_dim = model.config.head_dim
    norms: dict[str, list[torch.Tensor]] = {"wq": [], "wk": []}
    for layer in range(model.config.n_layer):
        for name, weight in zip(("wq", "wk"), model.qk_weights(layer), strict=True):
            w = weight.detach().float()
            whole = torch.linalg.matrix_norm(w, ord=2)
            per_head = torch.linalg.matrix_norm(w.view(-1, head_dim, w.shape[-1]), ord=2)
            norms[name].append(torch.cat([whole[None], per_head]))
    out: dict[str, list[Any]] = {}
    for name, rows in norms.items():
        table = torch.stack(rows).cpu().tolist()  # one device sync per matrix kind
        out[name] = [row[0] for row in table]
        out[f"{name}_heads"] = [row[1:] for row in table]
    return out


class JsonlLog:
    """Append-only JSONL, one record per line, flushed per line (readable while running)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(json_io.dumps(record, default=to_jsonable) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def truncate_jsonl(path: Path, before_step: int) -> None:
    """Keep only the intact records with step < before_step (a resumed run redoes the rest);
    everything from the first damaged line on goes (see `intact_end`)."""
    if not path.is_file():
        return
    kept = [line for line, step in _scan(path)[0] if step < before_step]
    write_text_atomic(path, "".join(line + "\n" for line in kept))


def intact_end(path: Path) -> tuple[int, int] | None:
    """(step, line): where a step log stops being intact, or None when it is intact throughout.

    A line is damaged when it is not a JSON object with an integer step, or repeats or goes
    back on the step before it. The records before it end at `step` (one past the last good
    one), so a resume must start from a checkpoint at or before that step to recompute what the
    damage hides; `line` (1-based) names it. A kill tears at most the last line, which lies
    past the last checkpoint, so it changes no resume."""
    if not path.is_file():
        return None
    intact, damaged = _scan(path)
    if damaged is None:
        return None
    return (intact[-1][1] + 1 if intact else 0), damaged


def _scan(path: Path) -> tuple[list[tuple[str, int]], int | None]:
    """((line, step) of the records before the first damaged line, that line's number)."""
    out: list[tuple[str, int]] = []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
            step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            return out, number
        if not isinstance(step, int) or isinstance(step, bool) or (out and step <= out[-1][1]):
            return out, number
        out.append((line, step))
    return out, None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json_io.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
