"""A suite's data checked before anything is written: split sizes against model.block_size (and
the validation split only where a cell evaluates), the model's vocabulary, and in a dry run a
pysource corpus checked where it is built and listed where it is not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from runner_helpers import suite_of

from flashprobe.data import python_corpus as corpus_module
from flashprobe.errors import FlashprobeError
from flashprobe.runner.data_check import check_data


def token_folder(root: Path, train: int, val: int) -> Path:
    root.mkdir()
    np.arange(train, dtype=np.uint16).tofile(root / "train.bin")
    np.arange(val, dtype=np.uint16).tofile(root / "val.bin")
    (root / "meta.json").write_text('{"vocab_size": 4096}')
    return root


def test_block_size_beyond_either_split_names_the_variant_and_the_remedy(
    tmp_path, make_suite
) -> None:
    folder = token_folder(tmp_path / "tokens", train=4096, val=33)
    data = {"source": "bin", "path": str(folder)}
    check_data(suite_of(make_suite(base={"data": data})).cells)  # eval_every 0: val not read
    evaluated = make_suite(base={"data": data}, variants={"sfa": {"metrics": {"eval_every": 4}}})
    with pytest.raises(FlashprobeError) as caught:
        check_data(suite_of(evaluated).cells)
    assert str(caught.value) == (
        "variant 'sfa': model.block_size 32 needs a validation split of at least 34 tokens; "
        f"the data has 33 ({folder}: 4,096 train + 33 val tokens (uint16)); lower "
        "model.block_size or set metrics.eval_every to 0"
    )
    long = make_suite(base={"data": data, "model": {"block_size": 4096}})
    with pytest.raises(FlashprobeError, match=r"'fa2': model\.block_size 4096 needs a training"):
        check_data(suite_of(long).cells)


def test_stdlib_settings_that_cannot_split(make_suite) -> None:
    small = make_suite(base={"data": {"max_bytes": 10}})
    with pytest.raises(FlashprobeError, match=r"^variant 'fa2': data: stdlib corpus too small"):
        check_data(suite_of(small).cells)
    long = make_suite(base={"model": {"block_size": 200_000}})
    with pytest.raises(FlashprobeError) as caught:
        check_data(suite_of(long).cells)
    assert str(caught.value).endswith("lower model.block_size or raise data.max_bytes")


def _fake_interpreter(tmp_path: Path, monkeypatch) -> None:
    """A pysource corpus of four small files instead of this interpreter's sources."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("a", "b", "c", "d"):
        (lib / f"{name}.py").write_text(f"# {name}\n" + "x = 1\n" * 20)
    monkeypatch.setattr(corpus_module, "source_roots", lambda: [("stdlib", lib)])


def test_a_dry_run_lists_a_pysource_corpus_it_would_have_to_build(
    tmp_path, make_suite, monkeypatch
) -> None:
    _fake_interpreter(tmp_path, monkeypatch)
    data = {"source": "pysource", "cache_dir": str(tmp_path / "cache"), "val_fraction": 0.5}
    base = {"data": {**data, "max_bytes": None}, "model": {"block_size": 512}}
    cells = suite_of(make_suite(base=base)).cells
    assert check_data(cells, build=False) == [
        "pysource corpus not built on this machine (data.max_bytes default): a run builds it "
        "first and checks its splits (fa2, sfa)"
    ]
    assert not (tmp_path / "cache").exists()  # nothing built
    with pytest.raises(FlashprobeError, match="needs a training split of at least 514 tokens"):
        check_data(cells)  # a run builds it, then checks
    assert list((tmp_path / "cache").glob("pysource-*/manifest.json"))
    with pytest.raises(FlashprobeError, match="needs a training split"):
        check_data(cells, build=False)  # built now: a dry run checks it too
    small_vocab = make_suite(
        base={"data": {**data, "max_bytes": None}, "model": {"block_size": 8, "vocab_size": 100}}
    )
    with pytest.raises(FlashprobeError, match=r"model.vocab_size \(100\) is smaller than the"):
        check_data(suite_of(small_vocab).cells, build=False)
