"""Preparing a suite: --variant selection and the replay: section, checked with the rest."""

from __future__ import annotations

import json

import pytest
from runner_helpers import suite_of

from flashprobe.errors import FlashprobeError
from flashprobe.runner.prepare import prepare_suite, replay_settings, select_variants


def test_select_variants_keeps_the_branch_source(make_suite) -> None:
    suite = suite_of(make_suite(branch={"from": "fa2", "step": 4}))
    assert [c.variant for c in select_variants(suite, ["sfa"]).cells] == ["fa2", "sfa"]
    with pytest.raises(FlashprobeError, match="--variant 'x' is not in the suite"):
        select_variants(suite, ["x"])


@pytest.mark.parametrize(
    ("replay", "needle"),
    [
        ({"bogus": 1}, "unknown replay key 'bogus'"),
        ({"baseline": "nope"}, "replay.baseline: no variant 'nope'"),
        ({"safe": "nope"}, "replay.safe: no variant 'nope'"),
        ({"components": {"ghost": "x"}}, "replay.components: no variant 'ghost'"),
        ({"variants": ["fa2", "ghost"]}, "replay.variants: no variant 'ghost'"),
        ({"variants": "fa2"}, "replay.variants must be a list"),
        ({"sources": "some"}, "replay.sources must be one of"),
        ({"backend": "cuda"}, "backend must be one of"),
        (5, "replay: must be a mapping"),
    ],
)
def test_bad_replay_sections_are_refused_with_the_suite(
    tmp_path, make_suite, replay, needle
) -> None:

    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps(make_suite(replay=replay)))
    with pytest.raises(FlashprobeError, match=needle):
        prepare_suite(path)


def test_a_failure_layer_the_model_lacks_is_refused_with_the_suite(tmp_path, make_suite) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps(make_suite(failure={"event": "logit-runaway", "layers": [9]})))
    with pytest.raises(FlashprobeError, match=r"failure\.layers: layer 9 out of range 0\.\.1"):
        prepare_suite(path, check_machine=False)


def test_replay_settings_of_a_suite(make_suite) -> None:

    assert replay_settings(suite_of(make_suite())) is None
    assert replay_settings(suite_of({**make_suite(), "replay": False})) is None
    assert replay_settings(suite_of({**make_suite(), "replay": None})).backend == "auto"
    settings = replay_settings(suite_of(make_suite(replay={"baseline": "fa2", "safe": "sfa"})))
    assert (settings.baseline, settings.safe, settings.sources) == ("fa2", "sfa", "baseline")
