"""An empty path or a file name written as a folder is refused before anything is read or
written: pathlib would read '' as the current folder and drop the slash of `name/`."""

from __future__ import annotations

import os

import pytest

from flashprobe.cli.path_args import file_path, folder_path

EMPTY_PATHS = [
    ("report", ""),
    ("replay", " "),
    ("ablate", "-c", "smoke", "--store", ""),
    ("digest", "", "out.json"),
    ("digest", "store", ""),
    ("digest-merge", "", "a.json", "b.json"),
    ("digest-report", "--plot", "", "a.json"),
    ("report", "store", "--plot", ""),
    ("logit-scale", "--plot", ""),
    ("spec", "--config", ""),
    ("bench", "--json", ""),
]

FOLDER_WHERE_A_FILE_GOES = [
    ("digest", "store", "newdir/"),
    ("digest-merge", "newdir/", "a.json", "b.json"),
    ("digest-merge", "out.json", "a.json/", "b.json"),
    ("digest-report", "a.json/"),
    ("logit-scale", "--plot", "figures/"),
    ("bench", "--json", "timings/"),
    ("spec", "--config", "kernel/.."),
]


@pytest.mark.parametrize("args", EMPTY_PATHS, ids=" ".join)
def test_an_empty_path_is_bad_input_and_writes_nothing(run_cli, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    result = run_cli(*args)
    assert result.code == 2
    assert "empty" in result.err and result.err.count("\n") == 1
    assert "Traceback" not in result.err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args", FOLDER_WHERE_A_FILE_GOES, ids=" ".join)
def test_a_file_name_written_as_a_folder_is_bad_input(run_cli, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    result = run_cli(*args)
    assert result.code == 2
    assert "names a folder" in result.err and result.err.count("\n") == 1
    assert os.listdir(tmp_path) == []


def test_the_parsers_keep_a_real_path_as_written() -> None:
    assert str(folder_path("runs/sub")) == "runs/sub"
    assert str(folder_path("runs/")) == "runs"  # a folder may be written with its slash
    assert str(file_path("out/d.json")) == "out/d.json"
    assert str(file_path("./d.json")) == "d.json"
