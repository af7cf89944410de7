"""Capture files read back (written by store.capture): run/captures/step_<t>.safetensors,
whole or header only. safetensors only: no code runs while loading."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from flashprobe.errors import FlashprobeError
from flashprobe.store.reader import CellView

CAPTURE_SUBDIR = "captures"


def capture_files(cell: CellView) -> list[tuple[int, Path]]:
    """(step, file) of every capture the cell holds, in step order."""
    folder = cell.run_dir / CAPTURE_SUBDIR
    out = []
    for path in folder.glob("step_*.safetensors"):
        try:
            out.append((int(path.stem.split("_")[-1]), path))
        except ValueError:
            continue
    return sorted(out)


@dataclass(frozen=True)
class Capture:
    step: int
    tensors: dict[str, torch.Tensor]
    metadata: dict[str, str]

    @property
    def layers(self) -> list[int]:
        found = {int(k.split(".")[0].removeprefix("layer")) for k in self.tensors if "." in k}
        return sorted(found)

    def layer(self, layer: int, name: str) -> torch.Tensor | None:
        return self.tensors.get(f"layer{layer}.{name}")

    @property
    def causal(self) -> bool:
        return self.metadata.get("causal", "true").lower() != "false"

    @property
    def softmax_scale(self) -> float | None:
        try:
            value = float(self.metadata["softmax_scale"])
        except (KeyError, ValueError):
            return None
        return value if math.isfinite(value) else None


def load_capture(step: int, path: Path) -> Capture:
    """Read one capture file (safetensors: no code runs while loading)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise FlashprobeError(f"corrupt capture file {path}: {type(exc).__name__}") from None
    return Capture(step=step, tensors=tensors, metadata=metadata)


@dataclass(frozen=True)
class CaptureHeader:
    """A capture file's tensor shapes and metadata, read from its header (no tensor data)."""

    step: int
    shapes: dict[str, tuple[int, ...]]
    metadata: dict[str, str]

    @property
    def layers(self) -> list[int]:
        return sorted({int(k.split(".")[0].removeprefix("layer")) for k in self.shapes if "." in k})

    def shape(self, layer: int, name: str) -> tuple[int, ...] | None:
        return self.shapes.get(f"layer{layer}.{name}")

    @property
    def causal(self) -> bool:
        return self.metadata.get("causal", "true").lower() != "false"


def read_capture_header(step: int, path: Path) -> CaptureHeader:
    """The shapes and metadata of one capture file (safetensors header only)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            shapes = {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise FlashprobeError(f"corrupt capture file {path}: {type(exc).__name__}") from None
    return CaptureHeader(step=step, shapes=shapes, metadata=metadata)
