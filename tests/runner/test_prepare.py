"""Preparing a suite: --variant selection and the replay: section, checked with the rest."""

from __future__ import annotations

import json

import pytest
import torch
from runner_helpers import suite_of

from flashprobe.errors import FlashprobeError
from flashprobe.runner.prepare import prepare_suite, replay_settings, select_variants


def test_select_variants_keeps_the_branch_source(make_suite) -> None:
    suite = suite_of(make_suite(branch={"from": "fa2", "step": 4}))
    assert [c.variant for c in select_variants(suite, ["sfa"]).cells] == ["fa2", "sfa"]
    with pytest.raises(FlashprobeError, match="--variant 'x' is not in the suite"):
        select_variants(suite, ["x"])


def test_the_machine_is_checked_for_the_selected_variants_only(tmp_path, make_suite) -> None:
    """An unknown --variant is named before what this machine lacks, and a CPU variant of a
    suite whose other variant needs a GPU runs on a CPU."""
    gpu = {"train": {"device": "cuda"}, "kernel": {"preset": "sfa", "block_n": 16}}
    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps(make_suite(variants={"sfa": gpu})))
    with pytest.raises(FlashprobeError, match="--variant 'nope' is not in the suite"):
        prepare_suite(path, variants=["nope"])
    assert [c.variant for c in prepare_suite(path, variants=["fa2"]).cells] == ["fa2", "sfa"]
    if not torch.cuda.is_available():
        with pytest.raises(FlashprobeError, match=r"variant 'sfa': train\.device is cuda"):
            prepare_suite(path)
        with pytest.raises(FlashprobeError, match=r"variant 'sfa': train\.device is cuda"):
            prepare_suite(path, variants=["sfa"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_selected_variant_s_branch_source_is_checked_for_the_machine(
    tmp_path, make_suite
) -> None:
    """--variant fa2 still trains fa2's branch source: its GPU need is not left out."""
    gpu = {"train": {"device": "cuda"}, "kernel": {"preset": "sfa", "block_n": 16}}
    path = tmp_path / "suite.yaml"
    path.write_text(
        json.dumps(make_suite(variants={"sfa": gpu}, branch={"from": "sfa", "step": 4}))
    )
    with pytest.raises(FlashprobeError, match=r"variant 'sfa': train\.device is cuda"):
        prepare_suite(path, variants=["fa2"])


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


def test_the_schema_docstring_names_every_key() -> None:
    """docs/ablate.md sends readers to this docstring for "every key": keep it complete."""
    import dataclasses
    import re
    import typing

    from flashprobe.attribution.failure import FailureRule
    from flashprobe.attribution.replay_settings import REPLAY_KEYS
    from flashprobe.data.config import DataConfig
    from flashprobe.model.config import AttentionConfig
    from flashprobe.runner import prepare
    from flashprobe.suites.cell_config import CaptureConfig
    from flashprobe.suites.estimate import THROUGHPUT_KEYS
    from flashprobe.suites.suite import BRANCH_KEYS, SUITE_KEYS
    from flashprobe.train.config import TrainConfig

    doc = prepare.__doc__ or ""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", doc))
    missing = {f"suite.{k}" for k in (*SUITE_KEYS, "inherit") if k not in words}
    missing |= {f"branch.{k}" for k in BRANCH_KEYS if k not in words}
    missing |= {f"replay.{k}" for k in REPLAY_KEYS if k not in words}
    missing |= {f"throughput.{k}" for k in THROUGHPUT_KEYS if k not in words}
    sections = {**TrainConfig.SECTIONS, "model.attention": AttentionConfig}
    sections |= {"capture": CaptureConfig, "failure": FailureRule}
    for section, cls in sections.items():
        for field in dataclasses.fields(cls):
            if field.name == "attention" or field.name.startswith(("capture_", "muon_")):
                continue  # a section of its own; metrics.capture_* is the old form of capture:
            if field.name not in words:
                missing.add(f"{section}.{field.name}")
    assert "muon_*" in doc
    # every value of a Literal-typed field is listed (data.source: stdlib|pysource|bin, ...)
    for cls in (DataConfig, *TrainConfig.SECTIONS.values(), AttentionConfig):
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if typing.get_origin(hints[field.name]) is typing.Literal:
                for value in typing.get_args(hints[field.name]):
                    if not re.search(rf"(?<![\w-]){re.escape(str(value))}(?![\w-])", doc):
                        missing.add(f"{cls.SECTION}.{field.name}={value}")
    assert not missing, f"prepare.py's schema lacks {sorted(missing)}"
