"""Which kernels each replayed variant runs: from its trained cells, another suite file, or the
suite's stored definition.

A variant replays with the head groups and KernelSpecs of its model config at the source cell's
grid point (`VariantConfigs.model`, `layer_groups`). Its configs come from:

- the suite's trained cells (their config.json): replayed by default;
- another suite file (`flashprobe replay --variants-from FILE`, `suite_file_variants`): its
  variants expanded as `flashprobe ablate -c FILE` expands them (bundled names, inherit, base,
  variant, axes, seeds), validated but for what only a training machine checks (a CUDA GPU, the
  data folder); replayed by default too, without being trained;
- the suite's stored definition (STORE/<suite>/suite.json, `declared_variants`): a variant
  declared there but never trained (`ablate --variant` ran a subset), when it is named
  (`--variant`, `replay.variants`).

An untrained variant must fit the captures (`check_fits`): the source cell's number of layers,
the captured heads, key/value heads and head dim, and a causal mask; else a one-line error.
A variant of another suite named like a trained variant is that variant when its kernels at the
source's grid point are the same (replayed once, from the trained cells); else a one-line error
(rename it in a copy of the file). At a grid point where a variant has no config, it replays with
the kernels all its grid points share (an error when they differ).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.model.config import ModelConfig
from flashprobe.spec import KernelSpec, format_field
from flashprobe.store import reader as sr
from flashprobe.store.capture_reader import CaptureHeader
from flashprobe.store.suite_definition import read_suite_definition
from flashprobe.suites.cell_config import normalise_cell_config, resolve_cell_config
from flashprobe.suites.suite import expand_suite, load_suite, point_label

Point = tuple[tuple[str, Any], ...]
#: One layer's head groups: (heads, spec or None when the heads use no flashprobe kernel).
LayerGroups = list[tuple[tuple[int, ...], KernelSpec | None]]


@dataclass(frozen=True)
class Run:
    """One config of a variant: its grid point, the cell config, and where it was read."""

    point: Point
    config: Mapping[str, Any]
    where: str


@dataclass(frozen=True)
class VariantConfigs:
    """A variant's configs (one per grid point and seed) and where they come from."""

    name: str
    runs: tuple[Run, ...]
    origin: str  # "trained", a suite file, or a suite.json path: named in messages
    trained: bool

    def model(self, point: Point) -> ModelConfig:
        """The model config at `point`; at a point it has no run, the one all its runs share."""
        same = [r for r in self.runs if r.point == point]
        runs = same[:1] or list({_canonical(r.config): r for r in self.runs}.values())
        models = [_model(r) for r in runs]
        if any(layer_groups(m) != layer_groups(models[0]) for m in models[1:]):
            raise FlashprobeError(
                f"variant {self.name!r} ({self.origin}) has no run at the grid point "
                f"{point_label(point) or '(none)'} and its kernels differ between its grid points"
            )
        return models[0]


def layer_groups(model: ModelConfig) -> dict[int, LayerGroups]:
    """Per layer, the head groups and their specs (None: the heads use sdpa or math)."""
    return {
        layer: [
            (g.heads, g.attention.spec if g.attention.impl == "flashprobe" else None)
            for g in model.head_groups(layer)
        ]
        for layer in range(model.n_layer)
    }


def trained_variants(cells: Sequence[sr.CellView]) -> dict[str, VariantConfigs]:
    """The variants of the suite's cells, from their config.json."""
    runs: dict[str, list[Run]] = {}
    for cell in cells:
        where = f"{cell.path}/config.json"
        runs.setdefault(cell.variant, []).append(Run(cell.point, cell.config, where))
    return {v: VariantConfigs(v, tuple(r), "trained", True) for v, r in runs.items()}


def suite_file_variants(config: str | Path) -> dict[str, VariantConfigs]:
    """The variants of a suite file (a path or a bundled suite's name), as `ablate` expands them;
    one-line FlashprobeError naming the file when it does not load."""
    try:
        suite = load_suite(config, validate=normalise_cell_config)
    except FlashprobeError as exc:
        raise FlashprobeError(f"--variants-from {config}: {exc}") from None
    return _variants(suite.cells, str(config))


def declared_variants(folder: Path) -> dict[str, VariantConfigs]:
    """The variants of STORE/<suite>/suite.json ({} without one)."""
    raw = read_suite_definition(folder)
    if raw is None:
        return {}
    where = str(Path(folder) / "suite.json")
    try:
        suite = expand_suite(raw, validate=normalise_cell_config, default_name=Path(folder).name)
    except FlashprobeError as exc:
        raise FlashprobeError(f"{where}: {exc}") from None
    return _variants(suite.cells, where)


def _variants(cells: Sequence[Any], origin: str) -> dict[str, VariantConfigs]:
    runs: dict[str, list[Run]] = {}
    for cell in cells:
        runs.setdefault(cell.variant, []).append(Run(cell.point, cell.config, origin))
    return {v: VariantConfigs(v, tuple(r), origin, False) for v, r in runs.items()}


def choose(
    suite: str,
    trained: Mapping[str, VariantConfigs],
    other: Mapping[str, VariantConfigs],
    folder: Path,
    names: Sequence[str] | None,
) -> dict[str, tuple[VariantConfigs, ...]]:
    """The variants to replay, each with its definitions (a trained one first): `names` in their
    order (each trained, of the other suite, or declared in suite.json), else every trained and
    other variant by name."""
    if names is None:
        names = sorted({*trained, *other})
    declared: dict[str, VariantConfigs] | None = None
    out: dict[str, tuple[VariantConfigs, ...]] = {}
    for name in names:
        found = tuple(d[name] for d in (trained, other) if name in d)
        if not found:
            declared = declared_variants(folder) if declared is None else declared
            found = (declared[name],) if name in declared else ()
        if not found:
            raise FlashprobeError(
                f"replay: no variant {name!r} in suite {suite!r} (trained, declared in its "
                "suite.json, or in the --variants-from file)"
            )
        out[name] = found
    return out


def resolve_groups(
    chosen: Mapping[str, Sequence[VariantConfigs]],
    source: sr.CellView,
    captures: Sequence[CaptureHeader],
) -> dict[str, dict[int, LayerGroups]]:
    """Per chosen variant, its layer groups at the source's grid point; an untrained variant is
    checked against the source and its captures, a name defined twice must mean one kernel."""
    source_model: ModelConfig | None = None
    out = {}
    for name, definitions in chosen.items():
        groups = None
        for definition in definitions:
            model = definition.model(source.point)
            if not definition.trained:
                if source_model is None:
                    source_model = _model(
                        Run(source.point, source.config, f"{source.path}/config.json")
                    )
                check_fits(definition, model, source_model, source.name, captures)
            mine = layer_groups(model)
            if groups is None:
                groups = mine
            elif mine != groups:
                raise FlashprobeError(
                    f"variant {name!r} of {definition.origin} runs other kernels than the "
                    f"trained {name!r} ({_first_difference(mine, groups)}); rename it in a copy "
                    "of the file"
                )
        assert groups is not None
        out[name] = groups
    return out


def check_fits(
    definition: VariantConfigs,
    model: ModelConfig,
    source_model: ModelConfig,
    source: str,
    captures: Sequence[CaptureHeader],
) -> None:
    """One-line FlashprobeError naming every shape in which the variant's model differs from
    the captures' (the layer count from the source cell's model, the rest from the files)."""
    found = {}
    if model.n_layer != source_model.n_layer:
        found["n_layer"] = (model.n_layer, source_model.n_layer)
    for header in captures:
        for layer in header.layers:
            q, k = header.shape(layer, "q"), header.shape(layer, "k")
            if q is None or k is None or len(q) != 4 or len(k) != 4:
                continue  # replay_source notes a capture that lacks q/k/v/do
            both_mha = model.kv_heads == model.n_head and k[1] == q[1]  # kv follows n_head
            for what, mine, theirs in (
                ("n_head", model.n_head, q[1]),
                ("kv heads", None if both_mha else model.kv_heads, None if both_mha else k[1]),
                ("head dim", model.head_dim, q[3]),
            ):
                if mine != theirs:
                    found.setdefault(what, (mine, theirs))
        if not header.causal:
            found.setdefault("causal", ("true", "false"))
    if found:
        shapes = ", ".join(f"{k} {mine} vs {theirs}" for k, (mine, theirs) in found.items())
        raise FlashprobeError(
            f"variant {definition.name!r} of {definition.origin} does not fit the captures of "
            f"{source}: {shapes} (variant vs captures)"
        )


def _first_difference(a: Mapping[int, LayerGroups], b: Mapping[int, LayerGroups]) -> str:
    for layer in sorted(set(a) | set(b)):
        mine, theirs = a.get(layer), b.get(layer)
        if mine == theirs:
            continue
        spec, other = (g[0][1] if g and len(g) == 1 else None for g in (mine, theirs))
        if spec is not None and other is not None and spec != other:
            fields = ", ".join(
                f"{k}={format_field(k, v)} vs {format_field(k, getattr(other, k))}"
                for k, v in spec.diff(other).items()
            )
            return f"layer {layer}: {fields}"
        return f"layer {layer}: other head groups"
    return "other layers"


def _model(run: Run) -> ModelConfig:
    try:
        return resolve_cell_config(run.config).train.model
    except FlashprobeError as exc:
        raise FlashprobeError(f"{run.where}: {exc}") from None


def _canonical(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)
