"""Which token stream a run trains on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from flashprobe.config_tools import build_config, check_fields, require

DataSource = Literal["stdlib", "pysource", "bin"]


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Token source.

    stdlib: byte-level tokens (vocab 256) of this Python's standard-library `.py` sources, built
        in memory on first use (nothing downloaded); every `1/val_fraction`-th file is validation.
        About 12 MB: CPU smoke runs.
    pysource: byte-level tokens of every `.py` file under this interpreter's stdlib and
        site-packages (a few hundred MB where PyTorch is installed), capped at `max_bytes`
        (default 1e9), built once into `cache_dir` (default $FLASHPROBE_CACHE or
        ~/.cache/flashprobe) with a manifest and the token stream's sha256: GPT-2-sized runs.
    bin: a nanoGPT-prepared folder `path` with uint16 `train.bin` and `val.bin` (e.g. OpenWebText
        with the GPT-2 tokenizer); the vocabulary comes from `vocab_size` or `meta.json`.
    """

    source: DataSource = "stdlib"
    path: str | None = None
    vocab_size: int | None = None
    val_fraction: float = 0.05
    #: stdlib / pysource: stop reading files once this many bytes are collected.
    max_bytes: int | None = None
    #: pysource only: where the built corpus is kept (default: see `default_cache_dir`).
    cache_dir: str | None = None
    #: Write every step's sample offsets to data_order.jsonl in the run folder.
    record_offsets: bool = True

    SECTION: ClassVar[str] = "data"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> DataConfig:
        return build_config(cls, data, cls.SECTION)

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION)
        require(
            0.0 < self.val_fraction <= 0.5,
            f"data.val_fraction must be in (0, 0.5], got {self.val_fraction}",
        )
        require(self.max_bytes is None or self.max_bytes > 0, "data.max_bytes must be > 0")
        require(self.vocab_size is None or self.vocab_size >= 2, "data.vocab_size must be >= 2")
        if self.source == "bin":
            require(self.path is not None, "data.path is required for data.source 'bin'")
        else:
            require(self.path is None, "data.path is only used with data.source 'bin'")
        if self.source != "pysource":
            require(
                self.cache_dir is None, "data.cache_dir is only used with data.source 'pysource'"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
