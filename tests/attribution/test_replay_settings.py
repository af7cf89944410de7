"""The replay: section and `flashprobe replay`'s flags: checked, and read back from the store."""

from __future__ import annotations

import json

import pytest

from flashprobe.attribution.replay_settings import ReplaySettings, stored_settings
from flashprobe.errors import FlashprobeError


def test_replay_settings_are_checked() -> None:
    with pytest.raises(FlashprobeError, match="unknown replay key"):
        ReplaySettings.from_suite({"baseline": "a", "bogus": 1})
    with pytest.raises(FlashprobeError, match="sources"):
        ReplaySettings.from_suite({"sources": "some"})
    assert ReplaySettings.from_suite(True).sources == "baseline"
    assert ReplaySettings.from_suite({"baseline": "a"}, baseline="b").baseline == "b"


def test_stored_settings_take_flags_then_suite_json_then_the_last_roles(tmp_path) -> None:
    folder = tmp_path / "suite"
    folder.mkdir()
    assert stored_settings(folder) == ReplaySettings()  # nothing stored: the defaults
    (folder / "replay.json").write_text(
        json.dumps(
            {
                "format": "flashprobe-replay/1",
                "variants": [],
                "summary": {},
                "roles": {"baseline": "fa2", "safe": "fp32", "components": {"sfa": "s"}},
            }
        )
    )
    inferred = stored_settings(folder)
    assert (inferred.baseline, inferred.safe, dict(inferred.components)) == (
        "fa2",
        "fp32",
        {"sfa": "s"},
    )
    (folder / "suite.json").write_text(
        json.dumps({"name": "suite", "replay": {"baseline": "paper-code", "backend": "emulator"}})
    )
    declared = stored_settings(folder)
    assert (declared.baseline, declared.safe, declared.backend) == (
        "paper-code",
        "fp32",
        "emulator",
    )
    flagged = stored_settings(folder, baseline="sfa", sources=None, variants=("sfa",))
    assert (flagged.baseline, flagged.variants, flagged.sources) == ("sfa", ("sfa",), "baseline")
