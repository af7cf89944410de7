"""Open the token stream a `DataConfig` names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashprobe.data.config import DataConfig
from flashprobe.data.python_corpus import PythonCorpus, built_python_corpus, python_corpus
from flashprobe.data.stdlib_corpus import BYTE_VOCAB, stdlib_corpus
from flashprobe.data.token_files import open_token_file, token_folder_vocab
from flashprobe.errors import FlashprobeError


@dataclass(frozen=True)
class TokenDataset:
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    description: str
    digest: str | None = None  # content hash of the token stream (built-in corpora)


def open_dataset(config: DataConfig) -> TokenDataset:
    _check_byte_vocab(config)
    if config.source == "pysource":
        built = python_corpus(config.val_fraction, config.max_bytes, config.cache_dir)
        return _pysource(config, built)
    if config.source == "stdlib":
        corpus = stdlib_corpus(config.val_fraction, config.max_bytes)
        return TokenDataset(
            corpus.train,
            corpus.val,
            config.vocab_size or BYTE_VOCAB,
            corpus.description,
            corpus.digest,
        )
    folder = Path(config.path or "")
    if not folder.is_dir():
        raise FlashprobeError(f"data folder not found: {folder}")
    train = open_token_file(folder / "train.bin")
    val = open_token_file(folder / "val.bin")
    vocab = token_folder_vocab(folder, config.vocab_size)
    return TokenDataset(
        train, val, vocab, f"{folder}: {len(train):,} train + {len(val):,} val tokens (uint16)"
    )


def built_dataset(config: DataConfig) -> TokenDataset | None:
    """The token stream when opening it builds nothing (the in-memory stdlib corpus, a pysource
    corpus already in its cache, a token folder), else None: a dry run's check."""
    if config.source != "pysource":
        return open_dataset(config)
    _check_byte_vocab(config)
    built = built_python_corpus(config.val_fraction, config.max_bytes, config.cache_dir)
    return _pysource(config, built) if built is not None else None


def _pysource(config: DataConfig, built: PythonCorpus) -> TokenDataset:
    return TokenDataset(
        open_token_file(built.folder / "train.bin"),
        open_token_file(built.folder / "val.bin"),
        config.vocab_size or BYTE_VOCAB,
        built.description,
        built.digest,
    )


def _check_byte_vocab(config: DataConfig) -> None:
    if config.source in ("stdlib", "pysource") and (config.vocab_size or BYTE_VOCAB) < BYTE_VOCAB:
        raise FlashprobeError(
            f"data.vocab_size must be >= {BYTE_VOCAB} for byte tokens, got {config.vocab_size}"
        )
