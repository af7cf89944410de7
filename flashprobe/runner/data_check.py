"""The token streams a suite trains on, checked before anything is written.

Each distinct data config of the suite is opened once (the stdlib corpus built in memory, a
pysource corpus built into its cache, a token folder mapped) and every cell's needs are checked
against it: a training split longer than model.block_size + 1, a validation split as long when
the cell evaluates (metrics.eval_every), a model vocabulary that holds the data's. A dry run
builds no pysource corpus: one that is not in the cache yet is listed instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flashprobe.data.config import DataConfig
from flashprobe.data.dataset import TokenDataset, built_dataset, open_dataset
from flashprobe.data.token_files import check_model_vocab, missing_token_files
from flashprobe.errors import FlashprobeError
from flashprobe.suites.cell_config import resolve_cell_config
from flashprobe.suites.suite import Cell, variant_names

#: how a dry run's line for a pysource corpus it did not build starts
NOT_BUILT = "pysource corpus not built on this machine"


def check_data(cells: Sequence[Cell], *, build: bool = True) -> list[str]:
    """Raise a one-line FlashprobeError naming the first cell whose data cannot feed it.

    build=False (a dry run): a pysource corpus not built yet is not built; returns one line per
    such corpus, naming its variants (a missing token folder is left to machine_problems)."""
    opened: dict[DataConfig, TokenDataset | None] = {}
    unchecked: dict[DataConfig, list[str]] = {}
    seen: set[tuple[object, ...]] = set()
    for cell in cells:
        config = resolve_cell_config(cell.config).train
        data, model = config.data, config.model
        if data not in opened:
            opened[data] = _open(data, cell.variant, build)
        dataset = opened[data]
        if dataset is None:
            if data.source == "pysource":
                unchecked.setdefault(data, []).append(cell.variant)
            continue
        need = (data, model.block_size, config.metrics.eval_every > 0, model.vocab_size)
        if need in seen:
            continue
        seen.add(need)
        where = f"variant {cell.variant!r}"
        block = model.block_size
        for split, tokens in (("training", dataset.train), ("validation", dataset.val)):
            if split == "validation" and not config.metrics.eval_every:
                continue  # never evaluated: the validation split is not read
            if len(tokens) < block + 2:
                raise FlashprobeError(
                    f"{where}: model.block_size {block} needs a {split} split of at least "
                    f"{block + 2} tokens; the data has {len(tokens)} ({dataset.description}); "
                    f"{_remedy(data, split)}"
                )
        try:
            check_model_vocab(model.vocab_size, dataset.vocab_size)
        except FlashprobeError as exc:
            raise FlashprobeError(f"{where}: {exc}") from None
    return [
        f"{NOT_BUILT} (data.max_bytes {data.max_bytes or 'default'}): a run builds it first and "
        f"checks its splits ({variant_names(variants)})"
        for data, variants in unchecked.items()
    ]


def _open(data: DataConfig, variant: str, build: bool) -> TokenDataset | None:
    if not build and data.source == "bin" and missing_token_files(Path(data.path or "")):
        return None  # a dry run elsewhere: machine_problems names the missing folder
    try:
        return open_dataset(data) if build else built_dataset(data)
    except FlashprobeError as exc:
        raise FlashprobeError(f"variant {variant!r}: data: {exc}") from None


def _remedy(data: DataConfig, split: str) -> str:
    larger = [] if data.source == "bin" else ["data.max_bytes"] * (data.max_bytes is not None)
    larger += ["data.val_fraction"] if split == "validation" and data.source != "bin" else []
    options = ["lower model.block_size"] + (["raise " + " or ".join(larger)] if larger else [])
    options += ["set metrics.eval_every to 0"] if split == "validation" else []
    return ", ".join(options[:-1]) + " or " + options[-1] if len(options) > 1 else options[0]
