"""safetensors files that are the same bytes for the same tensors and metadata.

safetensors writes its `__metadata__` mapping in the order of a Rust hash map, which changes
from process to process: two identical runs wrote capture files whose tensors were equal and
whose bytes (so their sha256, which keys the replays) were not. `save_bytes` writes the
metadata sorted by key; the tensors and their offsets are safetensors' own (already ordered).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import torch
from safetensors.torch import save

_LENGTH_BYTES = 8  # a little-endian u64 header length, then the JSON header, then the data


def save_bytes(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None) -> bytes:
    """safetensors.torch.save with the metadata in key order (the same length: same JSON)."""
    blob = save(dict(tensors), metadata=dict(metadata) if metadata is not None else None)
    if not metadata or len(metadata) < 2:
        return blob
    length = int.from_bytes(blob[:_LENGTH_BYTES], "little")
    header = json.loads(blob[_LENGTH_BYTES : _LENGTH_BYTES + length])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    ordered = {"__metadata__": header.pop("__metadata__"), **header}
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
    if len(text) > length:  # not the serialisation safetensors wrote: keep its bytes
        return blob
    padded = text + b" " * (length - len(text))  # safetensors pads its header with spaces
    return blob[:_LENGTH_BYTES] + padded + blob[_LENGTH_BYTES + length :]
