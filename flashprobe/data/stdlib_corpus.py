"""The built-in corpus: the Python standard library's own source files, as bytes.

Real code with long-range structure, available offline on every machine. Files are the `.py`
files under `sysconfig.get_paths()["stdlib"]`, excluding `site-packages` and test suites
(`test`/`tests` folders), in sorted path order, concatenated. With CPython 3.11 that is about
800 files and 12.6 MB; the exact bytes depend on the Python version, so runs record
`Corpus.digest`.
"""

from __future__ import annotations

import functools
import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashprobe.errors import FlashprobeError

EXCLUDED_DIRS = frozenset({"site-packages", "test", "tests"})
BYTE_VOCAB = 256


@dataclass(frozen=True)
class Corpus:
    train: np.ndarray  # uint8 tokens
    val: np.ndarray
    files: int
    digest: str  # sha256 prefix of all bytes, in order
    description: str


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The corpus files in their fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    files = [
        p for p in root.rglob("*.py") if not EXCLUDED_DIRS & set(p.relative_to(root).parts[:-1])
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


@functools.lru_cache(maxsize=4)
def stdlib_corpus(val_fraction: float = 0.05, max_bytes: int | None = None) -> Corpus:
    """Build (once per process and arguments) the train/val split of the stdlib corpus."""
    every = max(2, round(1 / val_fraction))
    train_parts: list[bytes] = []
    val_parts: list[bytes] = []
    digest = hashlib.sha256()
    total = 0
    files = stdlib_files()
    used = 0
    for i, path in enumerate(files):
        if max_bytes is not None and total >= max_bytes:
            break
        blob = path.read_bytes()
        digest.update(blob)
        # Whole files go to validation so no sequence straddles the split.
        (val_parts if i % every == every - 1 else train_parts).append(blob)
        total += len(blob)
        used += 1
    if not val_parts and len(train_parts) > 1:  # a small max_bytes: validate on the last file
        val_parts.append(train_parts.pop())
    if not train_parts or not val_parts:
        raise FlashprobeError(
            f"stdlib corpus too small for a validation split ({used} files); raise data.max_bytes"
        )
    train = np.frombuffer(b"".join(train_parts), dtype=np.uint8)
    val = np.frombuffer(b"".join(val_parts), dtype=np.uint8)
    return Corpus(
        train=train,
        val=val,
        files=used,
        digest=digest.hexdigest()[:16],
        description=f"stdlib bytes: {used} files, {len(train):,} train + {len(val):,} val tokens",
    )
