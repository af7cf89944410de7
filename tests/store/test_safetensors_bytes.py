"""store.safetensors_bytes: the same tensors and metadata give the same file bytes in every
process (safetensors alone orders its metadata by a per-process hash map)."""

from __future__ import annotations

import subprocess
import sys

import torch
from safetensors.torch import load, save

from flashprobe.store.safetensors_bytes import save_bytes

PROGRAM = """
import hashlib, sys, torch
from flashprobe.store.safetensors_bytes import save_bytes
tensors = {f"w{i}": torch.arange(6.0).reshape(2, 3) * i for i in range(4)}
metadata = {k: str(len(k)) for k in ("step", "sequences", "a", "layer", "variant", "zz")}
print(hashlib.sha256(save_bytes(tensors, metadata)).hexdigest())
"""


def test_the_bytes_are_the_same_in_every_process() -> None:
    runs = [subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(6)]  # fmt: skip
    assert len({r[0] for r in runs}) == 1  # safetensors' own bytes differ from run to run


def test_the_file_reads_back_as_written() -> None:
    tensors = {"q": torch.randn(2, 3, dtype=torch.bfloat16), "k": torch.arange(5)}
    metadata = {"step": "7", "layer": "1", "ünïcode": "é"}
    blob = save_bytes(tensors, metadata)
    back = load(blob)
    assert back.keys() == tensors.keys()
    assert all(torch.equal(back[k], tensors[k]) for k in tensors)
    length = int.from_bytes(blob[:8], "little")
    assert blob[8 : 8 + length].startswith('{"__metadata__":{"layer":"1","step":"7","ü'.encode())
    assert save_bytes(tensors, None) == save(tensors)  # no metadata: safetensors' own bytes
