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

#: Repeated squarings of each Gram matrix (its power 2^19). With the Rayleigh quotient of
#: `largest_singular_values` the relative error of σ₁ is then at most max(ln m, 1) / 2^21 whatever
#: the spectrum (m: the matrix's smaller side): 3.2e-6 for m = 768, under 1e-5 for any m < 10^9.
SPECTRAL_SQUARINGS = 19


@torch.no_grad()
def qk_spectral_norms(model: GPT) -> dict[str, list[Any]]:
    """Largest singular values of W_Q and W_K: per layer, and per layer and head.

    A head's block is its head_dim output rows of the matrix (the rows that produce that
    head's q or k), as in the paper's Fig. 3; W_K has one block per key/value head. Each kind's
    whole matrices and head blocks go through `largest_singular_values` as two batches, and the
    values reach the host in one transfer at the end.
    """
    head_dim = model.config.head_dim
    layers = range(model.config.n_layer)
    kinds = ("wq", "wk")
    batches = []
    for index in range(len(kinds)):
        stack = torch.stack([model.qk_weights(layer)[index].detach() for layer in layers])
        batches.append(largest_singular_values(stack))
        batches.append(largest_singular_values(stack.unflatten(1, (-1, head_dim)).flatten(0, 1)))
    values = torch.cat(batches).tolist()  # the one device sync
    out: dict[str, list[Any]] = {}
    for name, whole, heads in zip(kinds, batches[::2], batches[1::2], strict=True):
        per_layer, values = values[: len(whole)], values[len(whole) :]
        per_head, values = values[: len(heads)], values[len(heads) :]
        count = len(per_head) // len(per_layer)
        out[name] = per_layer
        out[f"{name}_heads"] = [per_head[i : i + count] for i in range(0, len(per_head), count)]
    return out


@torch.no_grad()
def largest_singular_values(
    mats: torch.Tensor, squarings: int = SPECTRAL_SQUARINGS
) -> torch.Tensor:
    """σ₁ of each matrix of a batch (..., m, n), in fp64, by repeated squaring of its Gram matrix.

    Why not an SVD: cuSOLVER runs its SVDs one matrix at a time, tens of milliseconds each at
    768 × 768 (1.4 s per record for GPT-2's 24 W_Q / W_K and their 288 head blocks on an H200,
    the GPU idle meanwhile). This is a fixed, small number of batched fp64 matmuls (fp64, so
    TF32 settings never matter) with no host sync.

    Method: scale W to a largest entry of 1 (zero stays zero), take G = W Wᵀ on the smaller side
    (m × m), square it `squarings` times (each time divided by its trace, so nothing overflows),
    so P ∝ G^N with N = 2^squarings; v = P's column of largest norm, and σ₁² ≈ ‖Wᵀv‖² / ‖v‖², a
    Rayleigh quotient of G.

    Worst case: with G = Σ λᵢuᵢuᵢᵀ and tᵢ = (λᵢ/λ₁)^2N, column j gives a quotient that is the
    mean of the λᵢ weighted by tᵢuᵢⱼ², so never above λ₁, short of it by Σ (1 − λᵢ/λ₁)·tᵢuᵢⱼ² / D
    relative, D = Σ tᵢuᵢⱼ². Summed over j the D's make Σ tᵢ ≥ 1, so the largest column has
    D ≥ 1/m; with 1 − λᵢ/λ₁ ≤ −ln(tᵢ)/2N and −t ln t concave the shortfall is at most
    max(ln m, 1)/2N for λ, half that for σ, whatever the gap between λ₁ and λ₂ (a near tie gives
    a value between σ₂ and σ₁). The bound is attained: a second singular vector on a coordinate
    that the top one avoids, with (σ₂/σ₁)^4N just above 1/m. fp64 rounding moves v by ~1e-13
    relative, which changes the quotient far less. So the result is a lower bound on σ₁ within
    3.2e-6 relative at m = 768, N = 2^19.
    """
    w = mats.detach().double()
    if w.shape[-2] > w.shape[-1]:
        w = w.mT
    scale = w.abs().amax(dim=(-2, -1), keepdim=True)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    w = w / scale
    tiny = torch.finfo(torch.float64).tiny
    power = w @ w.mT
    for _ in range(squarings):
        trace = power.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None]
        power = power / trace.clamp_min(tiny)
        power = power @ power
    # P is symmetric: its row j is its column j.
    best = power.square().sum(-1).argmax(-1)[..., None, None]
    v = power.take_along_dim(best, dim=-2)  # (..., 1, m)
    squared = (v @ w).square().sum((-2, -1)) / v.square().sum((-2, -1)).clamp_min(tiny)
    return squared.sqrt() * scale[..., 0, 0]


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
