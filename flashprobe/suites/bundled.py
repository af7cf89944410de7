"""The suites shipped with flashprobe, found by name: `--config gpt2.yaml` works from any folder.

The top-level `ablations/` folder installs as the package `flashprobe.ablations` (setup.py), in
editable and wheel installs alike. A path that exists always wins over a bundled name.
"""

from __future__ import annotations

from pathlib import Path

from flashprobe.errors import FlashprobeError

SUFFIXES = (".yaml", ".yml")


def checkout_dir() -> Path:
    """`ablations/` beside the package in a source checkout (run as `python -m flashprobe`
    from the repository root without an install, as the device scripts do)."""
    return Path(__file__).resolve().parents[2] / "ablations"


def bundled_dir() -> Path:
    """The folder holding the bundled suite files."""
    try:
        import flashprobe.ablations as package
    except ModuleNotFoundError:  # not installed, or an editable install older than the bundling
        if checkout_dir().is_dir():
            return checkout_dir()
        raise FlashprobeError(
            "the bundled suites (flashprobe.ablations) are not installed; reinstall flashprobe "
            "(pip install -e . in a checkout)"
        ) from None
    return Path(next(iter(package.__path__)))


def bundled_suites() -> dict[str, Path]:
    """Bundled suite name (file stem) → file, sorted by name."""
    folder = bundled_dir()
    files = sorted((p for p in folder.iterdir() if p.suffix in SUFFIXES), key=lambda p: p.stem)
    return {p.stem: p for p in files}


def find_suite(config: str | Path) -> Path:
    """The suite file `config` names: an existing path, else a bundled suite by name (`gpt2`,
    `gpt2.yaml`, or `ablations/gpt2.yaml` outside a checkout)."""
    if not str(config).strip():
        raise FlashprobeError("--config is empty: give a suite file or a bundled suite's name")
    path = Path(config)
    if path.exists():
        return path
    bare = path.parent == Path(".") or path.parent.name == "ablations"
    stem = path.stem if path.suffix in SUFFIXES else path.name
    if bare:
        bundled = bundled_suites()
        if stem in bundled:
            return bundled[stem]
        known = ", ".join(bundled)
        raise FlashprobeError(
            f"suite file not found: {config} (no such path, and no bundled suite {stem!r}; "
            f"bundled: {known})"
        )
    raise FlashprobeError(f"suite file not found: {config}")
