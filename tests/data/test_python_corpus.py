"""The python-sources corpus: deterministic order, split, cap, manifest, cache and digest."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from pathlib import Path
from stat import S_ISREG

import numpy as np
import pytest

from flashprobe.data import DataConfig, open_dataset
from flashprobe.data.python_corpus import (
    MANIFEST,
    SITE_DIRS,
    _in_threads,
    built_python_corpus,
    list_sources,
    python_corpus,
    source_roots,
)
from flashprobe.errors import FlashprobeError


def make_tree(root: Path) -> list[tuple[str, Path]]:
    """A stdlib with a nested site-packages (not this venv's) and a separate site root."""
    stdlib, site = root / "lib", root / "venv" / "site-packages"
    files = {
        stdlib / "os.py": b"import sys\n",
        stdlib / "json" / "__init__.py": b"# json\n" * 3,
        stdlib / "json" / "decoder.py": b"def decode(): pass\n",
        stdlib / "site-packages" / "other.py": b"never read\n",
        stdlib / "README.txt": b"not python\n",
        site / "pkg" / "__init__.py": b"VALUE = 1\n",
        site / "pkg" / "core.py": b"class Core:\n    pass\n" * 5,
        site / "a.py": b"a = 0\n",
    }
    for path, blob in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    (site / "link.py").symlink_to(site / "a.py")  # the same file twice: read once
    return [("stdlib", stdlib), ("site:0", site)]


def test_files_in_fixed_order_without_foreign_site_packages(tmp_path) -> None:
    roots = make_tree(tmp_path)
    names = [(f.root, f.relative) for f in list_sources(roots)]
    assert names == [
        ("stdlib", "json/__init__.py"),
        ("stdlib", "json/decoder.py"),
        ("stdlib", "os.py"),
        ("site:0", "a.py"),
        ("site:0", "pkg/__init__.py"),
        ("site:0", "pkg/core.py"),
    ]


def test_build_writes_tokens_manifest_and_digest(tmp_path) -> None:
    roots = make_tree(tmp_path)
    corpus = python_corpus(0.5, cache_dir=tmp_path / "cache", roots=roots, progress=False)
    train = np.fromfile(corpus.folder / "train.bin", dtype="<u2")
    val = np.fromfile(corpus.folder / "val.bin", dtype="<u2")
    files = [f.path.read_bytes() for f in list_sources(roots)]
    # every 2nd file (val_fraction 0.5) goes whole to validation
    assert train.tobytes() == np.frombuffer(b"".join(files[0::2]), np.uint8).astype("<u2").tobytes()
    assert val.tobytes() == np.frombuffer(b"".join(files[1::2]), np.uint8).astype("<u2").tobytes()
    manifest = json.loads((corpus.folder / MANIFEST).read_text())
    expected = hashlib.sha256(train.tobytes() + val.tobytes()).hexdigest()
    assert manifest["sha256"] == corpus.digest == expected
    assert manifest["files_used"] == 6 and manifest["train_tokens"] == len(train)
    assert [row[3] for row in manifest["files"]] == ["train", "val"] * 3


def test_cap_stops_after_the_file_that_reaches_it(tmp_path) -> None:
    roots = make_tree(tmp_path)
    corpus = python_corpus(0.5, max_bytes=40, cache_dir=tmp_path / "c", roots=roots, progress=False)
    assert corpus.manifest["files_used"] == 2  # 21 + 19 bytes reach the cap of 40


def test_cache_is_reused_and_a_changed_file_builds_anew(tmp_path) -> None:
    roots = make_tree(tmp_path)
    first = python_corpus(0.5, cache_dir=tmp_path / "cache", roots=roots, progress=False)
    marker = (first.folder / MANIFEST).stat().st_mtime_ns
    again = python_corpus(0.5, cache_dir=tmp_path / "cache", roots=roots, progress=False)
    assert again.folder == first.folder
    assert (again.folder / MANIFEST).stat().st_mtime_ns == marker  # not rebuilt
    (roots[1][1] / "a.py").write_bytes(b"a = 1  # changed\n")
    changed = python_corpus(0.5, cache_dir=tmp_path / "cache", roots=roots, progress=False)
    assert changed.folder != first.folder and changed.digest != first.digest


def _build(args: tuple[Path, Path]) -> str:
    tree, cache = args
    roots = [("stdlib", tree / "lib"), ("site:0", tree / "venv" / "site-packages")]
    return python_corpus(0.5, cache_dir=cache, roots=roots, progress=False).digest


def test_concurrent_builders_agree_on_one_folder(tmp_path) -> None:
    make_tree(tmp_path)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        digests = pool.map(_build, [(tmp_path, tmp_path / "cache")] * 3)
    assert len(set(digests)) == 1
    built = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert len(built) == 1 and not [p for p in built if ".tmp" in p.name]


def test_a_truncated_token_file_is_refused(tmp_path) -> None:
    roots = make_tree(tmp_path)
    corpus = python_corpus(0.5, cache_dir=tmp_path / "cache", roots=roots, progress=False)
    with open(corpus.folder / "train.bin", "r+b") as handle:
        handle.truncate(4)
    with pytest.raises(FlashprobeError, match="does not match its manifest"):
        python_corpus(0.5, cache_dir=tmp_path / "cache", roots=roots, progress=False)


def test_no_sources_is_an_error(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FlashprobeError, match=r"no \.py files"):
        python_corpus(cache_dir=tmp_path / "cache", roots=[("stdlib", tmp_path / "empty")])


def test_roots_of_this_interpreter_start_with_the_stdlib() -> None:
    roots = source_roots()
    assert roots[0][0] == "stdlib" and all(folder.is_dir() for _, folder in roots)
    assert len({folder for _, folder in roots}) == len(roots)


def test_dataset_from_config_records_the_digest(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLASHPROBE_CACHE", str(tmp_path / "cache"))
    dataset = open_dataset(DataConfig(source="pysource", max_bytes=300_000, val_fraction=0.1))
    assert dataset.vocab_size == 256 and dataset.train.dtype == np.uint16
    assert len(dataset.digest or "") == 64 and "python sources" in dataset.description
    assert int(dataset.train.max()) < 256 and len(dataset.val) > 0
    assert any((tmp_path / "cache").iterdir())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"source": "stdlib", "cache_dir": "/tmp/x"}, "only used with data.source 'pysource'"),
        ({"source": "pysource", "path": "/tmp/x"}, "only used with data.source 'bin'"),
        ({"source": "pysource", "vocab_size": 100}, ">= 256"),
    ],
)
def test_config_errors(fields, message) -> None:
    with pytest.raises(FlashprobeError, match=message):
        open_dataset(DataConfig(**fields))


def test_a_lookup_builds_nothing_and_finds_what_was_built(tmp_path) -> None:
    roots, cache = make_tree(tmp_path), tmp_path / "cache"
    assert built_python_corpus(0.5, cache_dir=cache, roots=roots) is None
    assert not cache.exists()
    corpus = python_corpus(0.5, cache_dir=cache, roots=roots, progress=False)
    found = built_python_corpus(0.5, cache_dir=cache, roots=roots)
    assert found is not None and found.folder == corpus.folder and found.digest == corpus.digest
    assert built_python_corpus(0.5, max_bytes=40, cache_dir=cache, roots=roots) is None


PINNED_MTIME_NS = 1_700_000_000_123_456_789


def make_pinned_tree(root: Path) -> list[tuple[str, Path]]:
    """A tree whose corpus is the same on every machine: relative roots (the test runs in `root`),
    fixed contents and fixed mtimes. It holds the cases the listing must get right: hidden and
    nested folders, a folder named like a source file, foreign site-packages under the stdlib, a
    link to a file, a hard link across roots, a dangling link, a linked folder, an empty file and
    bytes that are not text."""
    lib, site = root / "lib", root / "venv" / "site-packages"
    files: dict[Path, bytes] = {}
    for i in range(60):
        folder = lib.joinpath(*[f"pkg{(i + d) % 5}" for d in range(i % 4)])
        blob = hashlib.sha256(str(i).encode()).digest() * (i * 37 % 90)
        files[folder / f"mod_{i:02d}.py"] = f"# module {i}\n".encode() + blob
    for i in range(25):
        files[site / f"dist{i % 3}" / f"m{i}.py"] = f"VALUE = {i}\n".encode() * (i * 13 % 40)
    files |= {
        lib / ".hidden" / "h.py": b"hidden = True\n",
        lib / "site-packages" / "foreign.py": b"not this interpreter's\n",
        lib / "a" / "dist-packages" / "foreign.py": b"nor this\n",
        lib / "dir.py" / "inner.py": b"inner = 1\n",
        lib / "README.PY": b"upper case: not matched\n",
        lib / "notes.txt": b"not python\n",
        lib / "empty.py": b"",
        lib / "hard.py": b"hard = 'linked'\n",
        site / "a.py": b"a = 0\n",
    }
    for path, blob in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
        os.utime(path, ns=(PINNED_MTIME_NS, PINNED_MTIME_NS + len(blob)))
    os.link(lib / "hard.py", site / "hard_again.py")  # the same file from both roots: once
    (site / "link.py").symlink_to("a.py")
    (site / "dangling.py").symlink_to("missing.py")
    (site / "linked_folder").symlink_to(Path("..", "..", "lib", "pkg1"))  # not entered
    return [("stdlib", Path("lib")), ("site:0", Path("venv", "site-packages"))]


def rglob_sources(roots: list[tuple[str, Path]]) -> list[tuple[str, str, int, int]]:
    """A straightforward listing to compare with: rglob, sort, stat, first of each inode."""
    seen, rows = set(), []
    for label, root in roots:
        found = [
            p.relative_to(root).as_posix()
            for p in root.rglob("*.py")
            if label != "stdlib" or not SITE_DIRS & set(p.relative_to(root).parts[:-1])
        ]
        for relative in sorted(found):
            try:
                stat = (root / relative).stat()
            except OSError:
                continue
            if stat.st_ino in seen or not S_ISREG(stat.st_mode):
                continue
            seen.add(stat.st_ino)
            rows.append((label, relative, stat.st_size, stat.st_mtime_ns))
    return rows


def test_listing_matches_a_plain_rglob(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    roots = make_pinned_tree(tmp_path)
    listed = [(f.root, f.relative, f.size, f.mtime_ns) for f in list_sources(roots)]
    assert listed == rglob_sources(roots)
    names = {relative for _, relative, _, _ in listed}
    assert {".hidden/h.py", "dir.py/inner.py", "empty.py", "hard.py", "a.py"} <= names
    assert not names & {"hard_again.py", "link.py", "dangling.py", "dir.py", "README.PY"}
    assert not [n for n in names if "foreign" in n or n.startswith("linked_folder")]
    assert [f.path for f in list_sources(roots)][:2] == [
        Path("lib", ".hidden", "h.py"),
        Path("lib", "dir.py", "inner.py"),
    ]


def _manifest_digest(folder: Path) -> str:
    """sha256 of manifest.json as written, the interpreter's version masked."""
    text = (folder / MANIFEST).read_text()
    version = json.loads(text)["python"]
    masked = text.replace(f'"python": "{version}"', '"python": ""')
    return hashlib.sha256(masked.encode()).hexdigest()


# Pinned from the corpus builder as it was before the threaded build: the same files must give
# the same cache folder, the same manifest bytes and the same token stream.
PINNED = {
    None: (
        "pysource-c88c800b49004695",
        "f17c3f47806be37a847ac6aecd205dcda0fadce2fa877e2f78fce19bcc47c369",
        "c4070f345ff209722368a22f67d8bdabf2dcd7bd5c45a72c011f8d1218336abd",
        90,
    ),
    40_000: (
        "pysource-5075cf671f6b227a",
        "ff17c520768ab02c91ba2368af4a7102c1aab042035870d41cab826ef0590305",
        "35fb455f907bda05f76a17a77e2734c173c8e794f39afcd81f64fbdb3b36d55a",
        35,
    ),
}


@pytest.mark.parametrize("max_bytes", sorted(PINNED, key=lambda m: m or 0))
def test_build_is_pinned_byte_for_byte(tmp_path, monkeypatch, max_bytes) -> None:
    monkeypatch.chdir(tmp_path)
    roots = make_pinned_tree(tmp_path)
    corpus = python_corpus(0.25, max_bytes, cache_dir="cache", roots=roots, progress=False)
    tokens = (corpus.folder / "train.bin").read_bytes() + (corpus.folder / "val.bin").read_bytes()
    got = (
        corpus.folder.name,
        corpus.digest,
        _manifest_digest(corpus.folder),
        corpus.manifest["files_used"],
    )
    assert got == PINNED[max_bytes]
    assert hashlib.sha256(tokens).hexdigest() == corpus.digest


def test_threaded_reads_keep_the_order_and_stop_when_closed() -> None:
    seen: list[int] = []

    def work(item: int) -> int:
        seen.append(item)
        return item * item

    items = list(range(100))
    assert list(_in_threads(work, items, batch=3, workers=2)) == [i * i for i in items]
    seen.clear()
    reads = _in_threads(work, items, batch=3, workers=2)
    assert [next(reads) for _ in range(4)] == [0, 1, 4, 9]
    reads.close()
    assert len(seen) <= 3 * (2 * 2 + 2)  # the batches queued ahead, not the whole list
