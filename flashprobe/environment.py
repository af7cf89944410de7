"""Where a result came from: versions, platform, device, git SHA (for every report's JSON)."""

from __future__ import annotations

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


def git_sha(path: str | Path | None = None) -> str | None:
    """HEAD of the checkout holding `path` (default: this package), or None outside one."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


def environment(device: str | None = None) -> dict[str, Any]:
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
    }
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            torch = None
    if torch is not None:
        info["torch"] = torch.__version__
        if device is not None and device.startswith("cuda") and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info
