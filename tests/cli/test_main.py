"""The CLI root: version, help on every command, one-line errors with exit code 2."""

from __future__ import annotations

import pytest

from flashprobe import __version__
from flashprobe.cli import app


def test_version(run_cli) -> None:
    result = run_cli("--version")
    assert result.code == 0
    assert result.out.strip() == f"flashprobe {__version__}"


def test_no_arguments_prints_help(run_cli) -> None:
    result = run_cli()
    assert result.code == 0
    assert "Usage" in result.out


def _command_names() -> list[str]:
    from flashprobe.cli import _register_commands

    _register_commands()
    return [c.name for c in app.registered_commands]


@pytest.mark.parametrize("command", _command_names())
def test_every_command_has_help_with_examples(run_cli, command: str) -> None:
    result = run_cli(command, "--help")
    assert result.code == 0
    assert "Examples" in result.out


def test_unknown_option_is_one_line_exit_2(run_cli) -> None:
    result = run_cli("spec", "--no-such-flag")
    assert result.code == 2
    assert len(result.err.strip().splitlines()) == 1
    assert "--no-such-flag" in result.err


def test_an_os_error_is_one_line_exit_1(run_cli, monkeypatch, tmp_path) -> None:
    """A full disk or a vanished folder mid-command: one line naming it, no traceback."""
    import errno

    from flashprobe.reporting import report

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))

    monkeypatch.setattr(report, "build_reports", full_disk)
    result = run_cli("report", str(tmp_path))
    assert result.code == 1
    assert result.err.strip() == f"flashprobe: error: No space left on device: {tmp_path / 'x'}"


@pytest.mark.parametrize(
    ("code", "message"),
    [("ENOENT", "No such file or directory"), ("EACCES", "Permission denied"),
     ("EROFS", "Read-only file system")],
)  # fmt: skip
def test_an_os_error_about_the_path_is_bad_input_exit_2(
    run_cli, monkeypatch, tmp_path, code: str, message: str
) -> None:
    """A path that cannot be written (no such folder, no permission, read-only) is the
    user's argument, not a failed run: exit 2, as a missing input file is."""
    import errno

    from flashprobe.reporting import report

    def bad_path(*args, **kwargs):
        raise OSError(getattr(errno, code), message, str(tmp_path / "x"))

    monkeypatch.setattr(report, "build_reports", bad_path)
    result = run_cli("report", str(tmp_path))
    assert result.code == 2
    assert result.err.strip() == f"flashprobe: error: {message}: {tmp_path / 'x'}"


@pytest.mark.parametrize("command", ["ablate", "spec", "report", "digest", "digest-report"])
def test_a_path_too_long_is_bad_input_exit_2(run_cli, tmp_path, command: str) -> None:
    """A file name over the system's limit (ENAMETOOLONG) is a bad argument, like a missing
    file: one line, exit code 2, nothing written."""
    long = str(tmp_path / ("a" * 300))
    args = {
        "ablate": ["--config", long + ".yaml", "--dry-run"],
        "spec": ["--config", long + ".yaml"],
        "report": [long],
        "digest": [long, str(tmp_path / "d.json")],
        "digest-report": [long + ".json"],
    }[command]
    result = run_cli(command, *args)
    assert result.code == 2
    assert result.err.startswith("flashprobe: error: File name too long")
    assert len(result.err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "command",
    ["ablate", "spec", "digest", "digest-merge", "digest-report", "logit-scale"],
)
def test_every_file_argument_that_is_a_folder_is_bad_input_exit_2(
    run_cli, tmp_path, command: str
) -> None:
    """A folder given where a file is read or written: one line naming it, exit code 2, the
    folder left as it was (replay's --variants-from reads as logit-scale's)."""
    folder = tmp_path / "folder"
    (folder / "kept").mkdir(parents=True)
    store = tmp_path / "store"  # an empty store (digest)
    store.mkdir()
    args = {
        "ablate": ["--config", str(folder), "--dry-run"],
        "spec": ["--config", str(folder)],
        "digest": [str(store), str(folder)],
        "digest-merge": [str(tmp_path / "merged.json"), str(folder), str(folder)],
        "digest-report": [str(folder)],
        "logit-scale": ["--seq", "16", "--variants-from", str(folder)],
    }[command]
    result = run_cli(command, *args)
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flashprobe: error: "), result.err
    assert str(folder) in lines[0] and "folder" in lines[0].replace(str(folder), "")
    assert [p.name for p in folder.iterdir()] == ["kept"]
    assert not (tmp_path / "merged.json").exists()


@pytest.mark.parametrize("replacing", [False, True])
def test_a_folder_where_a_file_goes_is_bad_input_exit_2(
    run_cli, monkeypatch, tmp_path, replacing: bool
) -> None:
    """IsADirectoryError, from open() on a folder or from os.replace(tmp, folder) (which names
    the temporary file first): one line naming the folder, exit code 2."""
    import errno

    from flashprobe.reporting import report

    folder = tmp_path / "summary.json"
    folder.mkdir()

    def on_a_folder(*args, **kwargs):
        if replacing:  # as os.replace reports it
            tmp = str(tmp_path / ".summary.json.x.tmp")
            raise OSError(errno.EISDIR, "Is a directory", tmp, None, str(folder))
        folder.read_text()

    monkeypatch.setattr(report, "build_reports", on_a_folder)
    result = run_cli("report", str(tmp_path))
    assert result.code == 2
    assert result.err == f"flashprobe: error: {folder} is a folder, not a file\n"


@pytest.mark.parametrize("exit_code", [1, 130])
def test_a_run_stopped_short_is_one_line_with_its_exit_code(
    run_cli, monkeypatch, tmp_path, exit_code: int
) -> None:
    from flashprobe.errors import RunStopped
    from flashprobe.reporting import report

    def stopped(*args, **kwargs):
        raise RunStopped("interrupted; the finished cells are kept", exit_code)

    monkeypatch.setattr(report, "build_reports", stopped)
    result = run_cli("report", str(tmp_path))
    assert result.code == exit_code
    assert result.err == "flashprobe: interrupted; the finished cells are kept\n"
