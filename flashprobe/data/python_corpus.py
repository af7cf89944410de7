"""A large offline corpus: byte tokens of this interpreter's own Python sources.

Every `.py` file under the running interpreter's standard library and site-packages, in a fixed
order (root by root, then by relative path), read as bytes (vocabulary 256) until a size cap.
Every `val_every`-th file goes whole to validation, so no sequence straddles the split. On a
machine with PyTorch installed this is a few hundred MB of real code: enough for GPT-2-sized runs
that do not repeat data, with nothing downloaded.

Built once into a cache folder (never the repo), as nanoGPT token files (uint16 `train.bin`,
`val.bin`) plus `manifest.json`: the roots, the files, the byte counts and the sha256 of the token
stream that every run records. The cache key hashes the file list (paths, sizes, mtimes) and the
cap, so a changed environment builds a new folder instead of reusing a stale one. Concurrent
builders (`ablate --jobs`) wait on a lock; the folder appears atomically, complete or not at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import shutil
import sys
import sysconfig
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import TypeVar

import numpy as np

from flashprobe.errors import FlashprobeError

FORMAT = 1  # bump when the layout or the token order changes
DEFAULT_MAX_BYTES = 1_000_000_000
MANIFEST = "manifest.json"
SITE_DIRS = frozenset({"site-packages", "dist-packages"})
Item = TypeVar("Item")
T = TypeVar("T")


@dataclass(frozen=True)
class SourceFile:
    root: str  # which root: "stdlib" or "site:<n>"
    path: Path
    relative: str  # posix path under its root (the sort key)
    size: int
    mtime_ns: int


def default_cache_dir() -> Path:
    """$FLASHPROBE_CACHE, else $XDG_CACHE_HOME/flashprobe, else ~/.cache/flashprobe."""
    if os.environ.get("FLASHPROBE_CACHE"):
        return Path(os.environ["FLASHPROBE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "flashprobe"


def source_roots() -> list[tuple[str, Path]]:
    """(label, folder) of the interpreter's stdlib and its site-packages folders, deduplicated."""
    paths = sysconfig.get_paths()
    roots = [("stdlib", Path(paths["stdlib"]))]
    site = [Path(paths[k]) for k in ("purelib", "platlib")]
    site += [Path(p) for p in sys.path if Path(p).name in SITE_DIRS]
    seen: set[Path] = set()
    out: list[tuple[str, Path]] = []
    for label, folder in roots + [("site", p) for p in site]:
        resolved = folder.resolve()
        if resolved in seen or not resolved.is_dir():
            continue
        seen.add(resolved)
        out.append((label if label == "stdlib" else f"site:{len(out) - 1}", resolved))
    return out


def list_sources(roots: list[tuple[str, Path]]) -> list[SourceFile]:
    """The corpus files in their fixed order. A file reachable from two roots (a site-packages
    folder inside the stdlib, a symlink) is taken once, under the first root."""
    seen: set[tuple[int, int]] = set()  # (device, inode): links and overlapping roots
    files: list[SourceFile] = []
    for label, root in roots:
        relatives = sorted(_py_files(root, skip_site_dirs=label == "stdlib"))
        paths = [root / relative for relative in relatives]
        for relative, path, stat in zip(relatives, paths, _in_threads(_stat, paths), strict=True):
            if stat is None or (stat.st_dev, stat.st_ino) in seen or not S_ISREG(stat.st_mode):
                continue  # unreadable, a file seen from an earlier root or through a link, a folder
            seen.add((stat.st_dev, stat.st_ino))
            files.append(SourceFile(label, path, relative, stat.st_size, stat.st_mtime_ns))
    return files


def _py_files(root: Path, skip_site_dirs: bool) -> Iterator[str]:
    """The posix paths, relative to root, of the `*.py` entries that `root.rglob("*.py")` finds:
    every folder but linked ones is entered; site-packages folders are left out when asked
    (site-packages under the stdlib: its own root, or not this venv's)."""
    folders = [""]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(root / folder) as entries:
                listed = list(entries)
        except OSError:
            continue
        for entry in listed:
            relative = folder + entry.name
            if relative.endswith(".py"):
                yield relative  # a folder or a dangling link too: list_sources' stat drops them
            try:
                enter = entry.is_dir() and not entry.is_symlink()
            except OSError:
                enter = False
            if enter and not (skip_site_dirs and entry.name in SITE_DIRS):
                folders.append(relative + "/")


def cache_key(
    roots: list[tuple[str, Path]], files: list[SourceFile], max_bytes: int, val_every: int
) -> str:
    head = [FORMAT, val_every, max_bytes, [str(folder) for _, folder in roots]]
    h = hashlib.sha256(json.dumps(head).encode())
    for f in files:
        h.update(f"{f.root}\0{f.relative}\0{f.size}\0{f.mtime_ns}\n".encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class PythonCorpus:
    folder: Path
    manifest: dict

    @property
    def digest(self) -> str:
        return self.manifest["sha256"]

    @property
    def description(self) -> str:
        m = self.manifest
        return (
            f"python sources: {m['files_used']:,} files, {m['train_tokens']:,} train + "
            f"{m['val_tokens']:,} val byte tokens ({self.folder})"
        )


def python_corpus(
    val_fraction: float = 0.01,
    max_bytes: int | None = None,
    cache_dir: str | Path | None = None,
    roots: list[tuple[str, Path]] | None = None,
    progress: bool = True,
) -> PythonCorpus:
    """The corpus folder for this interpreter, built on first use (see the module docstring)."""
    where = _locate(val_fraction, max_bytes, cache_dir, roots)
    folder, cache = where.folder, where.folder.parent
    if not (folder / MANIFEST).is_file():
        try:
            cache.mkdir(parents=True, exist_ok=True)
            with _locked(cache / f".{folder.name}.lock"):
                if not (folder / MANIFEST).is_file():  # another process may have built it
                    _build(where, progress)
        except OSError as exc:
            raise FlashprobeError(f"cannot build the corpus in {cache}: {exc.strerror}") from None
    return PythonCorpus(folder, _read_manifest(folder))


def built_python_corpus(
    val_fraction: float = 0.01,
    max_bytes: int | None = None,
    cache_dir: str | Path | None = None,
    roots: list[tuple[str, Path]] | None = None,
) -> PythonCorpus | None:
    """The corpus when it is already built for these settings, else None (builds nothing)."""
    folder = _locate(val_fraction, max_bytes, cache_dir, roots).folder
    return PythonCorpus(folder, _read_manifest(folder)) if (folder / MANIFEST).is_file() else None


@dataclass(frozen=True)
class _Location:
    folder: Path  # the cache folder for these settings and these files, built or not
    roots: list[tuple[str, Path]]
    files: list[SourceFile]
    max_bytes: int
    val_every: int


def _locate(
    val_fraction: float,
    max_bytes: int | None,
    cache_dir: str | Path | None,
    roots: list[tuple[str, Path]] | None,
) -> _Location:
    max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    val_every = max(2, round(1 / val_fraction))
    roots = source_roots() if roots is None else roots
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    files = list_sources(roots)
    if not files:
        raise FlashprobeError(f"no .py files under {', '.join(str(r) for _, r in roots)}")
    folder = cache / f"pysource-{cache_key(roots, files, max_bytes, val_every)}"
    return _Location(folder, roots, files, max_bytes, val_every)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(where: _Location, progress: bool) -> None:
    folder, roots, files = where.folder, where.roots, where.files
    max_bytes, val_every = where.max_bytes, where.val_every
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    stream = hashlib.sha256()  # train tokens, then val tokens, as written (uint16 LE)
    counts = {"train": 0, "val": 0}
    used: list[list] = []
    total = min(max_bytes, sum(f.size for f in files))
    with (
        open(tmp / "train.bin", "wb") as train,
        open(tmp / "val.bin", "wb") as val,
        _progress_bar(total, progress, folder) as advance,
        contextlib.closing(_in_threads(_tokens, [f.path for f in files])) as reads,
    ):
        taken = 0
        for f, tokens in zip(files, reads, strict=True):
            if taken >= max_bytes:
                break
            if tokens is None:
                continue
            split = "val" if len(used) % val_every == val_every - 1 else "train"
            if split == "train":
                train.write(tokens)
                stream.update(tokens)
            else:
                val.write(tokens)
            counts[split] += len(tokens)
            taken += len(tokens)
            used.append([f.root, f.relative, len(tokens), split])
            advance(len(tokens))
    if counts["train"] < 2 or counts["val"] < 2:
        shutil.rmtree(tmp, ignore_errors=True)
        raise FlashprobeError(f"python corpus too small: {len(used)} files, {taken} bytes")
    with open(tmp / "val.bin", "rb") as handle:  # the stream is train tokens, then val tokens
        for chunk in iter(lambda: handle.read(1 << 24), b""):
            stream.update(chunk)
    manifest = {
        "format": FORMAT,
        "source": "pysource",
        "python": sys.version.split()[0],
        "roots": {label: str(path) for label, path in roots},
        "max_bytes": max_bytes,
        "val_every": val_every,
        "token_dtype": "uint16",
        "vocab_size": 256,
        "files_listed": len(files),
        "files_used": len(used),
        "train_tokens": counts["train"],
        "val_tokens": counts["val"],
        "sha256": stream.hexdigest(),
        "files": used,
    }
    (tmp / "meta.json").write_text(json.dumps({"vocab_size": 256}))
    (tmp / MANIFEST).write_text(json.dumps(manifest))  # last: its presence means complete
    tmp.replace(folder)


def _in_threads(
    work: Callable[[Item], T], items: list[Item], batch: int = 64, workers: int = 8
) -> Iterator[T]:
    """`work` of each item, in order, done by threads in batches a few batches ahead: for work that
    waits on the disk (waits release the GIL). Closed early, it starts no further batches."""

    def run(chunk: list[Item]) -> list[T]:
        return [work(item) for item in chunk]

    chunks = (items[i : i + batch] for i in range(0, len(items), batch))
    with ThreadPoolExecutor(workers) as pool:
        pending = deque(pool.submit(run, c) for c in itertools.islice(chunks, 2 * workers))
        try:
            while pending:
                done = pending.popleft().result()
                pending.extend(pool.submit(run, c) for c in itertools.islice(chunks, 1))
                yield from done
        finally:
            for future in pending:
                future.cancel()


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None  # a dangling link or an unreadable entry


def _tokens(path: Path) -> np.ndarray | None:
    """The file's bytes as uint16 LE tokens, or None where it cannot be read."""
    try:
        with open(path, "rb", buffering=0) as handle:
            blob = handle.read()
    except OSError:
        return None
    return np.frombuffer(blob, dtype=np.uint8).astype("<u2")


@contextlib.contextmanager
def _progress_bar(total: int, enabled: bool, folder: Path) -> Iterator:
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    console = Console(stderr=True)
    console.print(f"building the python-sources corpus into {folder} (once)")
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as bar:
        task = bar.add_task("corpus", total=total)
        yield lambda n: bar.advance(task, n)


def _read_manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise FlashprobeError(f"{folder / MANIFEST}: unreadable corpus manifest ({exc})") from None
    for name, key in (("train.bin", "train_tokens"), ("val.bin", "val_tokens")):
        size = (folder / name).stat().st_size if (folder / name).is_file() else -1
        if size != 2 * manifest.get(key, -1):
            raise FlashprobeError(
                f"{folder / name} does not match its manifest (delete {folder} to rebuild)"
            )
    return manifest
