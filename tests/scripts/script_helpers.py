"""Shared by the tests of scripts/*.py: load a script as a module, and check a refusal."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[2]


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def refused(main: Callable[[Sequence[str]], object], capsys, argv: Sequence[str], prog: str) -> str:
    """main(argv) stops with exit code 2 and one line on stderr, `<prog>: error: ...`: that
    line."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"{prog}: error: "), err
    return err


def one_line(stderr: str, code: int, prog: str) -> str:
    """A subprocess's refusal: exit code 2, one stderr line starting `<prog>: error: `."""
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), stderr
    return lines[0]
