"""Where a result came from: versions, platform, GPU, driver, git SHA (every result records it)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


def _version(dist: str) -> str | None:
    # importlib.metadata, not `import triton`: importing triton is slow and may fail on CPU
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _run(args: list[str], cwd: Path | None = None) -> str | None:
    """stdout of a short command, or None when it is missing or fails."""
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_sha(path: str | Path | None = None) -> str | None:
    """FLASHPROBE_GIT_SHA when set (a tree copied to a remote GPU machine may carry a stale or no
    .git), else HEAD of the checkout holding `path` (default: this package), else None."""
    if os.environ.get("FLASHPROBE_GIT_SHA"):
        return os.environ["FLASHPROBE_GIT_SHA"]
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    return _run(["git", "rev-parse", "HEAD"], cwd=where)


def git_dirty() -> bool | None:
    """Uncommitted changes to tracked files of flashprobe's checkout (None: not a checkout, or
    the version is named by FLASHPROBE_GIT_SHA, whose tree git cannot see)."""
    if os.environ.get("FLASHPROBE_GIT_SHA"):
        return None
    out = _run(["git", "status", "--porcelain", "--untracked-files=no"], Path(__file__).parent)
    return None if out is None else bool(out)


def nvidia_driver() -> str | None:
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def environment(device: str | None = None, world_size: int = 1) -> dict[str, Any]:
    """A JSON-ready description of the software and hardware a command ran on."""
    from flashprobe import __version__

    info: dict[str, Any] = {
        "flashprobe": __version__,
        "torch": None,
        "triton": _version("triton"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
        "gpu": None,
        "git_sha": git_sha(),
        "git_dirty": git_dirty(),
        "cpu_count": os.cpu_count(),
        "world_size": world_size,
    }
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            torch = None
    if torch is not None:
        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        cuda = torch.cuda.is_available()
        info["gpu_count"] = torch.cuda.device_count() if cuda else 0
        info["driver"] = nvidia_driver() if cuda else None
        if device is not None and device.startswith("cuda") and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info
