"""A suite cell's config → the TrainConfig and capture settings it runs with, checked up front.

A cell config is a mapping with the `TrainConfig` sections (model, data, optimizer, schedule,
train, divergence, metrics) plus three suite conveniences:

    kernel:  the KernelSpec of every `flashprobe` attention: a preset name or {preset, FIELD: ...}
             (shorthand for model.attention.spec; set one or the other)
    capture: {layers: [1], steps: [100, 200], max_bytes: 256MiB}
             tensors Q, K, V, O, LSE, dO of these layers (0-based) at these steps (0-based
             optimizer steps) into the cell's captures folder, at most max_bytes in all
             (see flashprobe.store.capture); shorthand for metrics.capture_layers/steps
    seed:    set by the suite's `seeds` list (becomes train.seed; do not set train.seed)

`normalise_cell_config` is the suite's validate callback: it builds everything (TrainConfig,
KernelSpec, capture) and returns the normalised config (every default filled in) that the store
saves and the cell key hashes. `check_runnable` checks what can only fail on the machine (CUDA-only
options on a CPU machine, a missing token folder, the batch split over torchrun ranks), for the
cells a run selects (runner.prepare).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from flashprobe.backends import machine_backend
from flashprobe.config_tools import build_config, check_fields, require
from flashprobe.data.token_files import check_model_vocab, missing_token_files, token_folder_vocab
from flashprobe.errors import FlashprobeError
from flashprobe.spec import make_spec
from flashprobe.train.config import TrainConfig

ON_CPU = "use backend emulator or auto on this machine"  # what a triton layer should say
SUITE_SECTIONS = ("kernel", "capture", "seed")
DEFAULT_CAPTURE_BYTES = 256 * 2**20
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20,
          "gib": 2**30}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class CaptureConfig:
    """Which attention tensors a cell saves, and the byte cap over all its capture files."""

    layers: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()
    max_bytes: int = DEFAULT_CAPTURE_BYTES

    SECTION: ClassVar[str] = "capture"

    @classmethod
    def from_dict(cls, data: Any) -> CaptureConfig:
        if isinstance(data, Mapping) and "max_bytes" in data:
            data = {**data, "max_bytes": parse_bytes(data["max_bytes"], "capture.max_bytes")}
        return build_config(cls, data, cls.SECTION)

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION)
        require(self.max_bytes >= 1, "capture.max_bytes must be >= 1")
        require(all(s >= 0 for s in self.steps), "capture.steps must be >= 0")
        require(len(set(self.steps)) == len(self.steps), "capture.steps repeat")

    @property
    def enabled(self) -> bool:
        return bool(self.layers and self.steps)


@dataclasses.dataclass(frozen=True)
class CellSetup:
    """What one cell runs with."""

    train: TrainConfig
    capture: CaptureConfig

    def to_dict(self) -> dict[str, Any]:
        """The normalised cell config (capture layers/steps live in metrics)."""
        return {**self.train.to_dict(), "capture": {"max_bytes": self.capture.max_bytes}}


def resolve_cell_config(config: Mapping[str, Any]) -> CellSetup:
    """Build a cell's TrainConfig and capture settings; one-line FlashprobeError on bad input."""
    if not isinstance(config, Mapping):
        raise FlashprobeError(f"a run config must be a mapping, got {type(config).__name__}")
    known = (*TrainConfig.SECTIONS, *SUITE_SECTIONS)
    for key in config:
        if key not in known:
            raise FlashprobeError(f"unknown config section {key!r}; known: {', '.join(known)}")
    data = copy.deepcopy(dict(config))
    kernel = data.pop("kernel", None)
    capture_raw = data.pop("capture", None)
    seed = data.pop("seed", None)

    if kernel is not None:
        try:
            make_spec(kernel)  # names the bad field as "kernel: ..."
        except FlashprobeError as exc:
            raise FlashprobeError(f"kernel: {exc}") from None
        model = _section(data, "model")
        attention = model.get("attention", {})
        if isinstance(attention, str):  # the model's shorthand: an impl or a preset name
            shorthand = "impl" if attention in ("sdpa", "math") else "spec"
            attention = {shorthand: attention}
        if not isinstance(attention, Mapping):
            raise FlashprobeError("model.attention must be a mapping")
        if "spec" in attention:
            raise FlashprobeError("set the kernel in one place: kernel or model.attention.spec")
        model["attention"] = {**attention, "spec": kernel}

    capture = CaptureConfig.from_dict(capture_raw)
    metrics = _section(data, "metrics")
    if (capture.layers or capture.steps) and (
        "capture_layers" in metrics or "capture_steps" in metrics
    ):  # two spellings of one setting would be ambiguous
        raise FlashprobeError("set captures in one place: capture or metrics.capture_*")
    if capture.layers or capture.steps:
        metrics["capture_layers"] = list(capture.layers)
        metrics["capture_steps"] = list(capture.steps)

    if seed is not None:
        train = _section(data, "train")
        if "seed" in train and train["seed"] != seed:
            raise FlashprobeError("train.seed: set seeds with the suite's `seeds` list")
        train["seed"] = seed

    train_config = TrainConfig.from_dict(data)
    metrics_config = train_config.metrics
    capture = dataclasses.replace(
        capture, layers=metrics_config.capture_layers, steps=metrics_config.capture_steps
    )
    for step in capture.steps:
        require(
            step < train_config.train.steps,
            f"capture.steps: step {step} is beyond the run (train.steps "
            f"{train_config.train.steps}; steps are 0-based)",
        )
    return CellSetup(train_config, capture)


def horizon(config: Mapping[str, Any]) -> int:
    """The train.steps of a cell config (0 when missing): the horizon the cell runs to."""
    steps = (config.get("train") or {}).get("steps")
    return int(steps) if isinstance(steps, int) else 0


def normalise_cell_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The suite's validate callback: resolve and normalise (the machine: check_runnable)."""
    return resolve_cell_config(config).to_dict()


def check_runnable(config: TrainConfig, cuda: bool | None = None) -> None:
    """What would fail only once training starts: CUDA-only options without a GPU, a missing
    token folder, a vocabulary too small for the data, a batch the ranks cannot split."""
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if config.train.device == "cuda" and not cuda:
        raise FlashprobeError("train.device is cuda but this machine has no CUDA GPU")
    if not cuda:
        for layer in range(config.model.n_layer):
            for group in config.model.head_groups(layer):
                attention = group.attention
                if attention.impl != "flashprobe":
                    continue
                try:
                    machine_backend(attention.backend, cuda=False, instead=ON_CPU)
                except FlashprobeError as exc:
                    raise FlashprobeError(f"layer {layer}: {exc}") from None
    data = config.data
    if data.source == "bin":
        folder = Path(data.path or "")
        missing = missing_token_files(folder)
        if missing:
            raise FlashprobeError(
                f"data.path {data.path}: no {missing[0]} there (point it at a nanoGPT token "
                "folder, e.g. --set data.path=/data/openwebtext)"
            )
        check_model_vocab(config.model.vocab_size, token_folder_vocab(folder, data.vocab_size))
    config.train.accumulation(int(os.environ.get("WORLD_SIZE", "1")))


def parse_bytes(value: Any, where: str) -> int:
    """An int, or a string such as '256MiB' / '1.5GB'."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", value)
        if match and match.group(2).lower() in _UNITS:
            return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    raise FlashprobeError(f"{where} must be a byte count such as 1048576 or '1MiB', got {value!r}")


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    section = data.setdefault(name, {})
    if section is None:
        section = data[name] = {}
    if not isinstance(section, Mapping):
        raise FlashprobeError(f"{name} must be a mapping, got {type(section).__name__}")
    section = data[name] = dict(section)
    return section
