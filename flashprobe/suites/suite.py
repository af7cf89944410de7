"""Ablation suites: a base run, named variants that override parts of it, and grid axes.

    name: smoke
    seeds: [0, 1]
    base:   {model: {...}, data: {...}, train: {...}, kernel: {preset: fa2}}
    variants:
      baseline: {}
      sfa: {kernel: {preset: sfa}}
    axes:                       # every combination, applied on top of every variant
      train.lr: [3.0e-3, 6.0e-3]
    branch: {from: baseline, step: 200}   # optional: variants start from baseline's checkpoint
    inherit: other.yaml         # optional: start from another suite file (base merges key by key)

A suite expands into cells (variant × axis point × seed). Each cell's config is base, then the
variant merged in, then the `--set` run-config overrides (the command line wins), then the axis
values, then `seed`. A `validate` callback may check it and return a normalised form (every
default filled in), so equal runs written differently share a key. `cell_key` hashes the config
(and, for a branched cell, its source's config) with the code version, so a result store can
skip finished cells and keep different code versions apart.

`--set KEY=VALUE`: KEY is a run-config key (`train.steps=100`, `kernel.beta=4`) applied to every
cell, or it edits the suite itself when it starts with a suite key: `seeds=[0,1,2]`,
`branch.step=50`, `base.train.lr=2e-3` (base only: variants may still override it),
`variants.sfa.kernel.beta=4`, `axes.optimizer.lr=[1e-3,2e-3]` (the axis name is the rest).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.spec import parse_assignments
from flashprobe.suites.bundled import find_suite
from flashprobe.yaml_io import read_yaml

SUITE_KEYS = ("name", "description", "seeds", "base", "variants", "axes", "branch", "replay",
              "failure", "throughput", "jobs")  # fmt: skip
#: Keys of how one file is run, not what it trains: `inherit:` never passes them on.
NOT_INHERITED = ("name", "description", "jobs")
BRANCH_KEYS = ("from", "step")
#: Suite and variant names become folder names in the result store (STORE/<suite>/
#: <variant>--<key>): used verbatim, so two names never share a folder, and never a path.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*", flags=re.ASCII)
MAX_NAME_LENGTH = 64
MAX_CELLS = 10_000  # variants × grid points × seeds: a typo in an axis should not eat the RAM


@dataclass(frozen=True)
class Cell:
    """One training run of a suite: a variant at one grid point and one seed."""

    suite: str
    variant: str
    point: tuple[tuple[str, Any], ...]  # (dotted key, value) of each axis, in axis order
    seed: int
    config: Mapping[str, Any]  # resolved run config, seed included
    branch_from: str | None = None  # variant whose checkpoint this cell starts from
    branch_step: int | None = None
    # The source cell's config: what produced the checkpoint this cell starts from (keyed too).
    source_config: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def group(self) -> tuple[tuple[tuple[str, Any], ...], int]:
        """(grid point, seed): a branched cell's source is the branch variant's cell here."""
        return self.point, self.seed

    @property
    def name(self) -> str:
        axes = ",".join(f"{k}={v}" for k, v in self.point)
        return f"{self.variant}" + (f"[{axes}]" if axes else "") + f"/seed{self.seed}"


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    cells: tuple[Cell, ...]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)
    #: processes to train in side by side when `ablate` is given no --jobs (`jobs:`, default 1)
    jobs: int = 1

    def variants(self) -> list[str]:
        return list(dict.fromkeys(c.variant for c in self.cells))


def load_suite(
    path: str | Path,
    overrides: Iterable[str] = (),
    validate: Callable[[Mapping[str, Any]], Any] | None = None,
) -> Suite:
    """Read a suite YAML (a path, or a bundled suite's name), apply `--set key=value`
    overrides to its base, expand, validate.

    `validate` receives every cell's resolved config and raises FlashprobeError on bad values,
    so a bad suite is rejected before anything runs.
    """
    path = find_suite(path)
    return expand_suite(read_suite(path), overrides, validate, default_name=path.stem)


def read_suite(path: Path, _children: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A suite file's mapping, with `inherit: OTHER.yaml` (a path relative to this file) resolved:
    the other suite's keys, then this file's on top; `base` merges key by key, every other key
    (variants, seeds, branch, ...) replaces the inherited one; name, description and jobs are
    never inherited."""
    raw = read_yaml(path, "suite")
    if not isinstance(raw, Mapping):
        got = "an empty file" if raw is None else type(raw).__name__
        raise FlashprobeError(
            f"{path}: a suite must be a mapping (name, seeds, base, variants, ...), got {got}"
        )
    raw = dict(raw)
    parent = raw.pop("inherit", None)
    if parent is None:
        return raw
    if not isinstance(parent, str) or not parent.strip():
        raise FlashprobeError(f"{path}: inherit must name another suite file, got {parent!r}")
    parent_path = (path.parent / parent).resolve()
    if parent_path in (*_children, path.resolve()):
        raise FlashprobeError(f"{path}: inherit forms a cycle through {parent_path}")
    inherited = read_suite(parent_path, (*_children, path.resolve()))
    merged = {k: v for k, v in inherited.items() if k not in NOT_INHERITED}
    for key, value in raw.items():
        if key == "base" and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def expand_suite(
    raw: Mapping[str, Any],
    overrides: Iterable[str] = (),
    validate: Callable[[Mapping[str, Any]], Any] | None = None,
    default_name: str = "suite",
) -> Suite:
    raw, run_overrides = apply_overrides(raw, overrides)
    unknown = sorted(str(k) for k in set(raw) - set(SUITE_KEYS))
    if unknown:
        raise FlashprobeError(f"unknown suite key {unknown[0]!r}; known: {', '.join(SUITE_KEYS)}")
    name = _suite_name(raw.get("name"), default_name)
    base = _mapping(raw.get("base", {}), "base")
    variants = _variants(raw.get("variants") or {"baseline": {}})
    seeds = _seeds(raw.get("seeds", [0]))
    axes = _axes(raw.get("axes") or {})
    branch_from, branch_step = _branch(raw.get("branch"), variants)
    count = len(variants) * len(seeds) * math.prod(len(v) for v in axes.values())
    if count > MAX_CELLS:
        raise FlashprobeError(
            f"the suite expands to {count} cells (variants × axis values × seeds); at most "
            f"{MAX_CELLS}"
        )
    for key in run_overrides:
        for axis in axes:
            if key == axis or key.startswith(axis + ".") or axis.startswith(key + "."):
                raise FlashprobeError(
                    f"--set {key} collides with axis {axis!r}; set the axis with "
                    f"--set axes.{axis}=[...]"
                )

    resolved: dict[tuple[str, tuple[tuple[str, Any], ...], int], dict[str, Any]] = {}
    order = []
    grid = list(itertools.product(*axes.values())) if axes else [()]
    runs: dict[tuple[str, int, str], int] = {}  # each resolved run's grid point (its index)
    for variant, delta in variants.items():
        config = deep_merge(base, _mapping(delta or {}, f"variants.{variant}"))
        for key, value in run_overrides.items():
            set_dotted(config, key, copy.deepcopy(value))
        for index, values in enumerate(grid):
            point_config = copy.deepcopy(config)
            for key, value in zip(axes, values, strict=True):
                set_dotted(point_config, key, copy.deepcopy(value))
            if "seed" in point_config:  # the seeds list would silently replace it
                raise FlashprobeError(
                    f"variant {variant!r}: seed: set seeds with the suite's `seeds` list "
                    "(--set 'seeds=[3]'), not a seed key"
                )
            # Hashable (cells are grouped and keyed by their point): list values as tuples.
            point = tuple(
                (key, hashable_value(value)) for key, value in zip(axes, values, strict=True)
            )
            for seed in seeds:
                cell_config: Any = {**copy.deepcopy(point_config), "seed": seed}
                if validate is not None:
                    try:
                        checked = validate(cell_config)
                    except FlashprobeError as exc:
                        raise FlashprobeError(f"variant {variant!r}: {exc}") from None
                    if isinstance(checked, Mapping):
                        cell_config = dict(checked)
                run = json.dumps(cell_config, sort_keys=True, default=str)
                same = runs.setdefault((variant, seed, run), index)
                if same != index:  # one cell folder: it would train once and be skipped after
                    first, second = (
                        point_label(zip(axes, grid[i], strict=True)) for i in (same, index)
                    )
                    raise FlashprobeError(
                        f"variant {variant!r}: grid points {first} and {second} are the same "
                        "run; drop one axis value"
                    )
                resolved[variant, point, seed] = cell_config
                order.append((variant, point, seed))

    cells = []
    for variant, point, seed in order:
        branched = branch_from is not None and variant != branch_from
        cells.append(
            Cell(
                suite=name,
                variant=variant,
                point=point,
                seed=seed,
                config=resolved[variant, point, seed],
                branch_from=branch_from if branched else None,
                branch_step=branch_step if branched else None,
                source_config=resolved[branch_from, point, seed] if branched else None,
            )
        )
    return Suite(
        name=name,
        description=_description(raw.get("description")),
        cells=tuple(cells),
        raw=dict(raw),
        jobs=_jobs(raw.get("jobs", 1)),
    )


def hashable_value(value: Any) -> Any:
    """A hashable equivalent of a YAML/JSON value: lists as tuples, mappings as sorted item
    tuples. Axis points are keyed this way here and when read back from a store's meta."""
    if isinstance(value, list | tuple):
        return tuple(hashable_value(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((k, hashable_value(v)) for k, v in value.items()))
    return value


def meta_point(meta: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A cell's grid point as its meta (cell.json, a digest) records it, hashable."""
    return tuple((str(k), hashable_value(v)) for k, v in meta.get("point") or [])


def point_label(point: Iterable[tuple[str, Any]]) -> str:
    """`key=value,key=value`: a grid point as tables and figures name it."""
    return ",".join(f"{k}={v}" for k, v in point)


def apply_overrides(
    raw: Mapping[str, Any], overrides: Iterable[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split `--set` assignments: suite edits go into a copy of `raw`; the rest (run-config
    keys) are returned to be applied on top of every cell."""
    raw = copy.deepcopy(dict(raw))
    run: dict[str, Any] = {}
    for key, value in parse_assignments(overrides).items():
        head, _, rest = key.partition(".")
        if head == "axes" and rest:
            axes = raw.get("axes")
            raw["axes"] = {**(axes if isinstance(axes, Mapping) else {}), rest: value}
        elif head == "variants" and rest:
            variant, _, sub = rest.partition(".")
            variants = raw.get("variants")
            if not isinstance(variants, Mapping) or variant not in variants:
                raise FlashprobeError(f"--set {key}: no variant {variant!r} in the suite")
            if sub:
                delta = variants[variant]
                delta = dict(delta) if isinstance(delta, Mapping) else {}
                set_dotted(delta, sub, value)
                raw["variants"] = {**variants, variant: delta}
            else:
                raw["variants"] = {**variants, variant: value}
        elif head in SUITE_KEYS:
            set_dotted(raw, key, value)
        else:
            run[key] = value
    return raw, run


def cell_key(cell: Cell, code_version: str) -> str:
    """Content hash of what determines a cell's result: its config, branch point, the config that
    trained its branch source, and the code version."""
    blob = json.dumps(
        {
            "config": cell.config,
            "branch": [cell.branch_from, cell.branch_step],
            "source": cell.source_config,
            "code": code_version,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# -- dict helpers --------------------------------------------------------------------------------
def deep_merge(base: Mapping[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `base` with `delta` merged in; nested mappings merge, everything else replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in delta.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_dotted(config: dict[str, Any], dotted: str, value: Any) -> None:
    """config['a']['b'] = value for dotted key 'a.b', creating mappings on the way."""
    parts = dotted.split(".")
    node = config
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise FlashprobeError(f"cannot set {dotted!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def check_name(name: Any, what: str) -> str:
    """A suite or variant name: 1 to MAX_NAME_LENGTH letters, digits and . _ + -, starting with
    a letter or digit (so never a path, a hidden file, `.` or `..`)."""
    if not isinstance(name, str):
        raise FlashprobeError(f"{what} must be a string, got {type(name).__name__}")
    if not name:
        raise FlashprobeError(f"{what} is empty")
    if len(name) > MAX_NAME_LENGTH:
        raise FlashprobeError(
            f"{what} {name[:20]!r}... is {len(name)} characters long; at most {MAX_NAME_LENGTH}"
        )
    if not NAME_PATTERN.fullmatch(name):
        raise FlashprobeError(
            f"{what} {name!r}: use letters, digits and . _ + - (starting with a letter or digit)"
        )
    return name


def _suite_name(value: Any, default: str) -> str:
    if value is None:
        try:
            return check_name(default, "suite name")
        except FlashprobeError as exc:
            raise FlashprobeError(f"{exc} (taken from the file name; set `name:`)") from None
    return check_name(_not_a_number(value, "suite name"), "suite name")


def _not_a_number(name: Any, what: str) -> Any:
    """Refuse a name YAML read as a number: it has already rewritten it (`0x10` is 16, `1_000`
    is 1000, `1e3` is 1000.0), so its folder would not carry the name as typed."""
    if isinstance(name, int | float) and not isinstance(name, bool):
        raise FlashprobeError(f"{what} {name!r} is a number in YAML; quote it ('{name}')")
    return name


def _variants(value: Any) -> dict[str, Any]:
    """The variants mapping with checked names; two names that differ only in case are refused
    too (their folders would be one on a case-insensitive file system)."""
    if not isinstance(value, Mapping):
        raise FlashprobeError(f"variants must be a mapping, got {type(value).__name__}")
    out: dict[str, Any] = {}
    folded: dict[str, str] = {}
    for key, delta in value.items():
        name = check_name(_not_a_number(key, "variant name"), "variant name")
        other = folded.setdefault(name.casefold(), name)
        if name in out or other != name:
            raise FlashprobeError(
                f"variant names {other!r} and {name!r} would share a folder in the result store"
            )
        out[name] = delta
    return out


def variant_names(variants: Iterable[str]) -> str:
    """Variant names for a one-line message: each once, at most four, then how many more."""
    names = list(dict.fromkeys(variants))
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise FlashprobeError(f"{where} must be a mapping, got {type(value).__name__}")
    return {str(k): v for k, v in value.items()}


def _seeds(value: Any) -> list[int]:
    seeds = value if isinstance(value, list) else []
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        hint = ""
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            hint = f" (seed {value} alone: [{value}]; {value} seeds: {list(range(value))})"
        raise FlashprobeError(f"seeds must be a list of integers, got {value!r}{hint}")
    if len(set(seeds)) != len(seeds):
        raise FlashprobeError(f"seeds repeat: {seeds}")
    return seeds


def _jobs(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FlashprobeError(f"jobs must be an integer >= 1, got {value!r}")
    return value


def _description(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise FlashprobeError(f"description must be a string, got {type(value).__name__}")
    return value


def _axes(value: Any) -> dict[str, list[Any]]:
    axes = _mapping(value, "axes")
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise FlashprobeError(f"axis {key!r} must be a non-empty list of values")
    return axes


def _branch(value: Any, variants: Mapping[str, Any]) -> tuple[str | None, int | None]:
    if value is None:
        return None, None
    branch = _mapping(value, "branch")
    unknown = sorted(set(branch) - set(BRANCH_KEYS))
    if unknown:
        raise FlashprobeError(f"unknown branch key {unknown[0]!r}; known: from, step")
    source, step = branch.get("from"), branch.get("step")
    if source not in variants:
        named = ", ".join(variants)  # without `variants:`, the one variant `baseline`
        raise FlashprobeError(
            f"branch.from must name one of the variants ({named}), got {source!r}"
        )
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise FlashprobeError(f"branch.step must be an integer >= 0, got {step!r}")
    return str(source), step
