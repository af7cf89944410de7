"""The built-in stdlib corpus and nanoGPT token folders."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flashprobe.data import DataConfig, open_dataset, stdlib_corpus, stdlib_files
from flashprobe.errors import FlashprobeError


def test_stdlib_files_are_sorted_and_skip_tests() -> None:
    files = stdlib_files()
    assert len(files) > 100
    assert not any({"test", "tests", "site-packages"} & set(p.parts) for p in files)
    names = [p.as_posix() for p in files]
    assert names == sorted(names)


def test_small_stdlib_corpus_is_deterministic_bytes() -> None:
    dataset = open_dataset(DataConfig(max_bytes=100_000))
    again = stdlib_corpus.__wrapped__(0.05, 100_000)  # rebuilt, not cached
    assert dataset.vocab_size == 256 and dataset.train.dtype == np.uint8
    assert dataset.digest == again.digest
    np.testing.assert_array_equal(dataset.train, again.train)
    assert len(dataset.val) > 0 and "stdlib bytes" in dataset.description


def write_bin(folder, train: int = 500, val: int = 200) -> None:
    np.arange(train, dtype=np.uint16).tofile(folder / "train.bin")
    np.arange(val, dtype=np.uint16).tofile(folder / "val.bin")


def test_token_folder_with_meta_json(tmp_path) -> None:
    write_bin(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"vocab_size": 600}))
    dataset = open_dataset(DataConfig(source="bin", path=str(tmp_path)))
    assert dataset.vocab_size == 600 and len(dataset.train) == 500 and dataset.val[199] == 199
    assert isinstance(dataset.train, np.memmap)


def test_token_folder_vocab_from_config_wins(tmp_path) -> None:
    write_bin(tmp_path)
    dataset = open_dataset(DataConfig(source="bin", path=str(tmp_path), vocab_size=50304))
    assert dataset.vocab_size == 50304


def test_token_folder_without_vocab_is_an_error(tmp_path) -> None:
    write_bin(tmp_path)
    (tmp_path / "meta.pkl").write_bytes(b"not read")
    with pytest.raises(FlashprobeError, match=r"set data\.vocab_size"):
        open_dataset(DataConfig(source="bin", path=str(tmp_path)))


def test_missing_token_file(tmp_path) -> None:
    with pytest.raises(FlashprobeError, match="token file not found"):
        open_dataset(DataConfig(source="bin", path=str(tmp_path), vocab_size=10))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"source": "owt"}, "data.source must be one of stdlib, pysource, bin"),
        ({"source": "bin"}, "data.path is required"),
        ({"val_fraction": 0.9}, "data.val_fraction must be in"),
        ({"shuffle": True}, "unknown key data.shuffle"),
    ],
)
def test_data_config_errors(data, message) -> None:
    with pytest.raises(FlashprobeError, match=message):
        DataConfig.from_dict(data)
