"""Capture files read back (written by store.capture): run/captures/step_<t>.safetensors,
whole or header only, and their sha256 (manifest.json's, else read off the file).
safetensors only: no code runs while loading."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from flashprobe.errors import FlashprobeError
from flashprobe.store.capture import MANIFEST
from flashprobe.store.reader import CellView
from flashprobe.store.result_store import read_json

CAPTURE_SUBDIR = "captures"


def capture_files(cell: CellView) -> list[tuple[int, Path]]:
    """(step, file) of every capture the cell holds, in step order. A file its manifest.json
    lists that is not there is a one-line FlashprobeError: a replay without it would stand for
    the cell's captures with a step (or all of them) left out. (A captures folder removed whole
    holds none: a store whose captures were deleted to free disk.)"""
    folder = cell.run_dir / CAPTURE_SUBDIR
    out = []
    for path in folder.glob("step_*.safetensors"):
        try:
            out.append((int(path.stem.split("_")[-1]), path))
        except ValueError:
            continue
    present = {path.name for _, path in out}
    missing = [name for name in manifest_entries(folder) if name not in present]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise FlashprobeError(
            f"missing capture file {folder / missing[0]}{more}: {folder / MANIFEST} lists it"
        )
    return sorted(out)


def manifest_entries(folder: Path) -> dict[str, Mapping[str, Any]]:
    """manifest.json's step entries by file name ({} without a manifest); a manifest that is
    not of the shape store.capture writes is a one-line FlashprobeError."""
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    manifest = read_json(path)
    steps = manifest.get("steps") if isinstance(manifest, dict) else None
    if not isinstance(steps, dict):
        raise FlashprobeError(f"corrupt capture manifest {path}: no steps mapping")
    out = {}
    for step, entry in steps.items():
        name = entry.get("file") if isinstance(entry, dict) else ""
        if name is not None and not (isinstance(name, str) and name.endswith(".safetensors")):
            raise FlashprobeError(f"corrupt capture manifest {path}: step {step!r:.20}")
        if name is not None:
            out[Path(name).name] = entry
    return out


def capture_sha256(steps: Sequence[tuple[int, Path]]) -> list[str]:
    """The sha256 of each capture file: the one its manifest.json recorded when it was written
    (for a file of the size recorded with it), else read off the file (older stores)."""
    manifests: dict[Path, dict[str, Mapping[str, Any]]] = {}
    out = []
    for _, path in steps:
        if path.parent not in manifests:
            manifests[path.parent] = manifest_entries(path.parent)
        entry = manifests[path.parent].get(path.name) or {}
        digest, size = entry.get("sha256"), entry.get("bytes")
        if isinstance(digest, str) and len(digest) == 64 and size == path.stat().st_size:
            out.append(digest)
        else:
            out.append(file_sha256(path))
    return out


def file_sha256(path: Path) -> str:
    """A file's sha256, read in chunks."""
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as exc:
        raise FlashprobeError(f"cannot read {path}: {exc.strerror}") from None


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


def _why(exc: Exception) -> str:
    """safetensors' reason on one line ("Error while deserializing header: header too large"),
    else the error's type."""
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_capture(step: int, path: Path) -> Capture:
    """Read one capture file (safetensors: no code runs while loading)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for bad headers
        raise FlashprobeError(f"corrupt capture file {path}: {_why(exc)}") from None
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
        raise FlashprobeError(f"corrupt capture file {path}: {_why(exc)}") from None
    return CaptureHeader(step=step, shapes=shapes, metadata=metadata)
