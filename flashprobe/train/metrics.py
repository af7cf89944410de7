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
    """Keep only records with step < before_step (a resumed run redoes the rest)."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] < before_step:
                kept.append(line)
        except (ValueError, KeyError, TypeError):
            break  # a torn last line from a crash
    write_text_atomic(path, "".join(line + "\n" for line in kept))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json_io.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
