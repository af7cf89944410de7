"""Size-capped tensor captures: one safetensors file per captured step (layout: store module).

The cap (capture.max_bytes) covers every capture file of a cell. It is split evenly over the
steps the cell will capture, so each file's share is known before training starts and does not
depend on what an interrupted run already wrote. A step whose tensors exceed its share keeps
only the first sequences of the micro-batch that fit (whole sequences, ≥ 1); when not even one
sequence fits, the step is skipped and manifest.json says so. What counts is the serialised file:
every tensor of TENSOR_NAMES per captured layer (the layer input X included: B × T × n_embd, as
much as one of Q/K/V) plus the header, all trimmed to the same sequences. Files are serialised
in memory, then written to a temporary name and renamed, so a killed run never leaves half a
file; manifest.json records each file's sha256 (what replay keys an unchanged capture by: it
survives a copy that does not keep file times).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from flashprobe.reporting.atomic import write_bytes_atomic, write_text_atomic
from flashprobe.store.safetensors_bytes import save_bytes
from flashprobe.suites.cell_config import CaptureConfig
from flashprobe.train.config import TrainConfig

CAPTURE_DIR = "captures"
MANIFEST = "manifest.json"
FORMAT = "flashprobe-capture/1"
#: Per captured layer i, the keys "layer{i}.<name>" (shapes and dtypes: store.result_store).
TENSOR_NAMES = ("x", "q", "k", "v", "o", "lse", "do")


def capture_file_name(step: int) -> str:
    return f"step_{step:07d}.safetensors"


class CaptureWriter:
    """The `capture` sink of train_run for one cell (rank 0 only)."""

    def __init__(
        self, folder: Path, capture: CaptureConfig, train: TrainConfig, start_step: int = 0
    ) -> None:
        self.folder = folder
        self.capture = capture
        planned = sorted(s for s in capture.steps if start_step <= s < train.train.steps)
        self.planned_steps = planned
        self.share = capture.max_bytes // max(len(planned), 1)
        model = train.model
        self.base_metadata = {
            "format": FORMAT,
            "layers": json.dumps(list(capture.layers)),
            "causal": "true",
            "softmax_scale": repr(1.0 / math.sqrt(model.head_dim)),
            "attention": json.dumps(_attention_of(train, capture.layers)),
        }

    def __call__(self, step: int, tensors: Mapping[str, torch.Tensor]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest = self._manifest()
        name = capture_file_name(step)
        total = min(t.shape[0] for t in tensors.values())
        keep, blob = total, b""
        while keep >= 1:
            blob = self._serialise(step, tensors, keep, total)
            if len(blob) <= self.share:
                break
            # Shrink by the payload ratio first, then one sequence at a time (the header).
            keep = min(keep - 1, max(1, int(keep * self.share / len(blob))))
        entry: dict[str, Any] = {"step": step, "sequences_in_micro_batch": total}
        if keep >= 1:
            write_bytes_atomic(self.folder / name, blob)
            entry.update(
                file=name, sequences=keep, bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest()
            )
        else:
            (self.folder / name).unlink(missing_ok=True)  # a stale file from an earlier attempt
            entry.update(file=None, sequences=0, bytes=0, skipped="one sequence exceeds the share")
        manifest["steps"][str(step)] = entry
        write_text_atomic(self.folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")

    def _serialise(
        self, step: int, tensors: Mapping[str, torch.Tensor], keep: int, total: int
    ) -> bytes:
        trimmed = {k: t[:keep].contiguous() for k, t in sorted(tensors.items())}
        metadata = {
            **self.base_metadata,
            "step": str(step),
            "sequences": str(keep),
            "sequences_in_micro_batch": str(total),
        }
        return save_bytes(trimmed, metadata)

    def _manifest(self) -> dict[str, Any]:
        path = self.folder / MANIFEST
        manifest: dict[str, Any] = {}
        if path.is_file():
            try:
                manifest = json.loads(path.read_text())
            except ValueError:
                manifest = {}  # rewritten whole below; the files themselves are intact
        return {
            "format": FORMAT,
            "max_bytes": self.capture.max_bytes,
            "share_bytes": self.share,
            "layers": list(self.capture.layers),
            "planned_steps": self.planned_steps,
            "steps": dict(manifest.get("steps", {})),
        }


def _attention_of(train: TrainConfig, layers: tuple[int, ...]) -> dict[str, Any]:
    """Per captured layer: each head group's attention (impl, backend, full KernelSpec)."""
    return {
        str(layer): [
            {"heads": list(group.heads), **group.attention.to_dict()}
            for group in train.model.head_groups(layer)
        ]
        for layer in layers
    }
