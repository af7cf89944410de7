"""nanoGPT-format token files: `train.bin` / `val.bin`, flat uint16 arrays read by np.memmap."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from flashprobe.errors import FlashprobeError

TOKEN_DTYPE = np.uint16


SPLIT_FILES = ("train.bin", "val.bin")


def missing_token_files(folder: Path) -> list[str]:
    """The split files a token folder lacks (all of them when it does not exist)."""
    return [name for name in SPLIT_FILES if not (folder / name).is_file()]


def check_model_vocab(model_vocab: int | None, data_vocab: int) -> None:
    """A model vocabulary (None: taken from the data) must hold every token of the data."""
    if model_vocab is not None and model_vocab < data_vocab:
        raise FlashprobeError(
            f"model.vocab_size ({model_vocab}) is smaller than the data's vocabulary ({data_vocab})"
        )


def open_token_file(path: Path) -> np.ndarray:
    if not path.is_file():
        raise FlashprobeError(f"token file not found: {path}")
    if path.stat().st_size < 2 * np.dtype(TOKEN_DTYPE).itemsize:
        raise FlashprobeError(f"token file is empty: {path}")
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r")


def token_folder_vocab(folder: Path, vocab_size: int | None) -> int:
    """The vocabulary: the config's value, else `meta.json`'s `vocab_size`.

    nanoGPT's `meta.pkl` is not read: unpickling can execute code. Its OpenWebText preparation
    writes no meta at all (GPT-2 BPE, 50257 tokens; nanoGPT pads the model to 50304).
    """
    if vocab_size is not None:
        return vocab_size
    meta = folder / "meta.json"
    if meta.is_file():
        try:
            value = json.loads(meta.read_text())["vocab_size"]
        except (ValueError, KeyError, TypeError):
            raise FlashprobeError(f"{meta}: expected a JSON object with vocab_size") from None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
            return value
        raise FlashprobeError(f"{meta}: vocab_size must be an integer >= 2, got {value!r}")
    raise FlashprobeError(
        f"set data.vocab_size for {folder} (no meta.json; e.g. 50304 for GPT-2 BPE)"
    )
