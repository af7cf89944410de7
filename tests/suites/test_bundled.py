"""Bundled suites by name (flashprobe.suites.bundled): a path that exists wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.suites.bundled import bundled_suites, find_suite
from flashprobe.suites.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]


def test_every_suite_in_ablations_is_bundled() -> None:
    shipped = {p.stem for p in (ROOT / "ablations").glob("*.yaml")}
    assert set(bundled_suites()) == shipped and "gpt2" in shipped


@pytest.mark.parametrize("name", ["gpt2", "gpt2.yaml", "ablations/gpt2.yaml"])
def test_a_bundled_suite_is_found_by_name_from_any_folder(name, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = find_suite(name)
    assert path.name == "gpt2.yaml" and path.is_file()
    assert path.read_bytes() == (ROOT / "ablations" / "gpt2.yaml").read_bytes()


def test_a_path_that_exists_wins_over_a_bundled_name(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke.yaml").write_text("name: mine\nbase: {}\n")
    assert find_suite("smoke.yaml") == Path("smoke.yaml")
    assert load_suite("smoke.yaml").name == "mine"


def test_an_unknown_name_lists_the_bundled_suites(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        FlashprobeError, match=r"no bundled suite 'gtp2'; bundled: adamw-6l-search, .*, gpt2, "
    ):
        find_suite("gtp2.yaml")
    with pytest.raises(FlashprobeError, match=r"^suite file not found: elsewhere/gpt2.yaml$"):
        find_suite("elsewhere/gpt2.yaml")  # a path with a folder is a path, not a name


def test_a_source_checkout_without_an_install_finds_its_ablations_folder(
    tmp_path, monkeypatch
) -> None:
    # `python -m flashprobe` from a repository root that was never pip-installed (the device
    # scripts): flashprobe.ablations does not import, the checkout's ablations/ serves.
    import sys

    from flashprobe.suites import bundled

    monkeypatch.setitem(sys.modules, "flashprobe.ablations", None)  # the import now fails
    monkeypatch.chdir(tmp_path)
    assert bundled.bundled_dir() == ROOT / "ablations"
    assert find_suite("adamw-attribution.yaml") == ROOT / "ablations" / "adamw-attribution.yaml"
    monkeypatch.setattr(bundled, "checkout_dir", lambda: tmp_path / "no-such-folder")
    with pytest.raises(FlashprobeError, match=r"bundled suites .* are not installed"):
        find_suite("gpt2")
