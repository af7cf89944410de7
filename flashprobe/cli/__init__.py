"""The `flashprobe` command line. Thin: each command parses its flags and delegates."""

from __future__ import annotations

import errno
import sys

import typer

from flashprobe import __version__
from flashprobe.cli import signals
from flashprobe.errors import FlashprobeError, RunStopped

app = typer.Typer(
    name="flashprobe",
    help="Find which part of a low-precision flash-attention kernel makes a BF16 run diverge.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"flashprobe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """flashprobe: instruments for BF16 flash-attention failures (arXiv:2510.04212)."""


def _register_commands() -> None:
    # Imported here so `flashprobe --version` stays fast and each command lives in its module.
    from flashprobe.cli import commands  # noqa: F401


#: OSErrors that say the path given was wrong, not that the run failed (a full disk: exit 1).
_BAD_PATH_ERRNOS = frozenset(
    {errno.ENAMETOOLONG, errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS}
)


def error(message: str) -> None:
    """Print a one-line error and exit with code 2 (bad input)."""
    typer.echo(f"flashprobe: error: {message}", err=True)
    raise SystemExit(2)


def interrupted() -> None:
    """Print that the command was interrupted and exit with the signal's code (130, 143)."""
    typer.echo("flashprobe: interrupted", err=True)
    raise SystemExit(signals.interrupt_exit_code())


def main(argv: list[str] | None = None) -> None:
    """Console entry point: bad input becomes one line on stderr and exit code 2."""
    with signals.holding_interrupts() as arrived:
        _register_commands()
    if arrived:
        interrupted()
    signals.terminate_as_interrupt()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["--help"]
    try:
        result = app(args=argv, standalone_mode=False, prog_name="flashprobe")
    except FlashprobeError as exc:
        error(str(exc))
    except RunStopped as exc:
        typer.echo(f"flashprobe: {exc}", err=True)
        code = signals.interrupt_exit_code() if exc.exit_code == 130 else exc.exit_code
        raise SystemExit(code) from None
    except KeyboardInterrupt:
        interrupted()
    except IsADirectoryError as exc:  # a folder where a file is read or written: bad input
        # os.replace(tmp, path) names the temporary file first and the folder second
        path = exc.filename2 or exc.filename
        error(f"{path} is a folder, not a file" if path else f"{exc.strerror or exc}")
    except OSError as exc:  # a full disk, a vanished folder: one line, not a traceback
        where = f": {exc.filename}" if exc.filename else ""
        typer.echo(f"flashprobe: error: {exc.strerror or exc}{where}", err=True)
        # A path that cannot exist or be written is a bad argument (exit 2), not a failed run.
        raise SystemExit(2 if exc.errno in _BAD_PATH_ERRNOS else 1) from None
    except Exception as exc:
        # Typer vendors click in new releases and depends on it in old ones: match by shape.
        if type(exc).__name__ == "Exit":
            raise SystemExit(getattr(exc, "exit_code", 0)) from None
        if type(exc).__name__ == "Abort":
            error("aborted")
        if hasattr(exc, "format_message"):  # usage errors: bad option, missing argument
            error(exc.format_message().splitlines()[0])
        raise
    if result == 130:  # typer returns Exit(130) for a Ctrl-C in a command; no command does
        interrupted()
    sys.exit(result if isinstance(result, int) else 0)
