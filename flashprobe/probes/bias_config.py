"""`flashprobe bias`'s knobs: the experiment's config, its `--variant` strings, their checks."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from flashprobe.errors import FlashprobeError
from flashprobe.spec import FIELD_NAMES, PRESETS, KernelSpec, make_spec, split_variant

#: Rows sharing one V in the batch layout (each ties on its own keys).
ROWS_PER_BLOCK = 8
#: Ties are placed inside an aligned group of this many keys, so they share a key tile for every
#: block_n (the smallest tile a spec allows is 16); per-tile tie detection then sees them.
TIE_GROUP = 16
#: Guard against allocating more than this many V elements (fp32) at once.
MAX_ELEMENTS = 1 << 28
TIE_PLACEMENTS = ("tile", "anywhere")
SCORE_GRIDS = ("fp32", "bf16")
#: Keys of a variant string that change the data rather than the kernel spec.
DATA_KEYS = ("ties", "v_mean", "tail_v_mean")
#: The pseudo-variant "the exact O, rounded once to bf16".
EXACT = "exact"

DEFAULT_BETAS = (2.0, 4.0, 8.0)


def default_variants(betas: Sequence[float] = DEFAULT_BETAS) -> list[str]:
    """The standard kernels, their stabilized versions at several β, fp32, and controls."""
    for beta in betas:
        if isinstance(beta, bool) or not (math.isfinite(beta) and beta > 1):
            raise FlashprobeError(f"--beta must be a finite number > 1, got {beta:g}")
    out = ["exact", "paper-code"]
    out += [f"paper-sfa:beta={_num(b)}" for b in betas]
    out += ["fa2"]
    out += [f"sfa:beta={_num(b)}" for b in betas]
    # the stabilized P̄ of the tied keys is no longer exactly 1, so ℓ summed from the unrounded
    # P̄ stops matching the rounded numerator (FA PR #2721's mismatch); this row isolates it
    out += ["sfa:l_from_rounded_p=true", "fp32", "exact:ties=1", "paper-code:ties=1", "fa2:ties=1"]
    out += ["exact:tail_v_mean=0", "paper-code:tail_v_mean=0", "fa2:tail_v_mean=0"]
    return out


@dataclass(frozen=True)
class BiasConfig:
    """Every knob of the experiment (all are CLI flags)."""

    rows: int = 1024
    keys: int = 1024
    head_dim: int = 64
    ties: int = 2
    gap: tuple[float, float] = (12.0, 30.0)
    max_score: tuple[float, float] = (1.0, 5.0)
    v_mean: float = -2.5
    v_std: float = 0.5
    tail_v_mean: float | None = None  # None: the tail's V has the tied tokens' mean
    tie_placement: str = "tile"
    score_grid: str = "fp32"
    variants: tuple[str, ...] = field(default_factory=lambda: tuple(default_variants()))
    seed: int = 0
    device: str = "cpu"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Variant:
    """A parsed `--variant`: a kernel spec plus optional per-variant data overrides."""

    name: str
    spec: KernelSpec | None  # None: the `exact` pseudo-variant
    data: dict[str, Any]


def parse_variant(text: str) -> Variant:
    """`PRESET` or `PRESET:KEY=VALUE[,KEY=VALUE...]`.

    KEY is a KernelSpec field (`fa2:softmax=stabilized,beta=4`) or a data key
    (`ties`, `v_mean`, `tail_v_mean`) that changes this variant's rows only
    (`paper-code:ties=1`). Values are read as YAML scalars.
    """
    text = text.strip()
    base, assigned = split_variant(text, [*PRESETS, EXACT])
    data = {k: v for k, v in assigned.items() if k in DATA_KEYS}
    fields = {k: v for k, v in assigned.items() if k not in DATA_KEYS}
    unknown = sorted(set(fields) - set(FIELD_NAMES))
    if unknown:
        raise FlashprobeError(
            f"variant {text!r}: unknown key {unknown[0]!r}; use a kernel spec field "
            f"({', '.join(FIELD_NAMES)}) or one of {', '.join(DATA_KEYS)}"
        )
    if base == EXACT and fields:
        raise FlashprobeError(f"variant {text!r}: {EXACT} takes only {', '.join(DATA_KEYS)}")
    try:
        spec = None if base == EXACT else make_spec(base, fields)
    except FlashprobeError as exc:
        raise FlashprobeError(f"variant {text!r}: {exc}") from None
    for key, value in data.items():
        if key == "ties":
            if isinstance(value, bool) or not isinstance(value, int):
                raise FlashprobeError(f"variant {text!r}: ties must be an integer")
        elif value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise FlashprobeError(f"variant {text!r}: {key} must be a number")
        if key != "tail_v_mean" and value is None:
            raise FlashprobeError(f"variant {text!r}: {key} needs a value")
        if isinstance(value, float) and not math.isfinite(value):
            raise FlashprobeError(f"variant {text!r}: {key} must be finite")
    return Variant(name=text, spec=spec, data=data)


def parse_range(text: str, what: str) -> tuple[float, float]:
    """`LO:HI` (or a single number) → (lo, hi)."""
    lo_s, sep, hi_s = text.partition(":")
    try:
        lo = float(lo_s)
        hi = float(hi_s) if sep else lo
    except ValueError:
        raise FlashprobeError(f"{what} must be LO:HI (numbers), got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise FlashprobeError(f"{what} must be finite with LO <= HI, got {text!r}")
    return lo, hi


def validate(config: BiasConfig) -> list[Variant]:
    """Check every knob (one-line FlashprobeError) and parse the variants."""
    c = config
    for name in ("rows", "keys", "head_dim", "ties", "seed"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise FlashprobeError(f"--{name.replace('_', '-')} must be an integer, got {value!r}")
    if c.rows < 2:
        raise FlashprobeError(f"--rows must be at least 2 (a t-statistic needs rows), got {c.rows}")
    if c.head_dim < 1:
        raise FlashprobeError(f"--head-dim must be at least 1, got {c.head_dim}")
    if not 0 <= c.seed < 2**64:  # torch.Generator.manual_seed takes 64 bits
        raise FlashprobeError(f"--seed must be in [0, 2**64), got {c.seed}")
    if c.score_grid not in SCORE_GRIDS:
        raise FlashprobeError(
            f"--score-grid must be one of {', '.join(SCORE_GRIDS)}, got {c.score_grid!r}"
        )
    if c.tie_placement not in TIE_PLACEMENTS:
        raise FlashprobeError(
            f"--tie-placement must be one of {', '.join(TIE_PLACEMENTS)}, got {c.tie_placement!r}"
        )
    lo, hi = c.gap
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise FlashprobeError(f"--gap must satisfy 0 < LO <= HI, got {lo:g}:{hi:g}")
    if not all(math.isfinite(x) for x in c.max_score) or c.max_score[0] > c.max_score[1]:
        raise FlashprobeError(f"--max-score must be finite with LO <= HI, got {c.max_score}")
    top = torch.finfo(torch.float32).max  # the scores are fp32, as a kernel's q·kᵀ
    if any(abs(x) >= top for x in c.max_score):
        raise FlashprobeError(f"--max-score must lie within ±{top:.2g} (fp32), got {c.max_score}")
    for name in ("v_mean", "v_std"):
        if not math.isfinite(getattr(c, name)):
            raise FlashprobeError(f"--{name.replace('_', '-')} must be finite")
    if c.tail_v_mean is not None and not math.isfinite(c.tail_v_mean):
        raise FlashprobeError("--tail-v-mean must be finite")
    if c.v_std < 0:
        raise FlashprobeError(f"--v-std must be >= 0, got {c.v_std:g}")
    if c.device not in ("cpu", "cuda"):
        raise FlashprobeError(f"--device must be cpu or cuda, got {c.device!r}")
    if c.device == "cuda" and not torch.cuda.is_available():
        raise FlashprobeError("--device cuda: no CUDA GPU is available here; use --device cpu")
    if not c.variants:
        raise FlashprobeError("no variants to run")
    variants = [parse_variant(v) for v in c.variants]
    for ties in {c.ties, *(v.data.get("ties", c.ties) for v in variants)}:
        _check_ties(ties, c)
    per_row = rows_per_block(c, max(v.data.get("ties", c.ties) for v in variants))
    blocks = -(-c.rows // per_row)
    if blocks * c.keys * c.head_dim > MAX_ELEMENTS:
        raise FlashprobeError(
            f"rows × keys × head-dim too large for one pass ({blocks * c.keys * c.head_dim:,} "
            f"V elements > {MAX_ELEMENTS:,}); lower --rows, --keys or --head-dim"
        )
    return variants


def _check_ties(ties: int, c: BiasConfig) -> None:
    if ties < 1:
        raise FlashprobeError(f"--ties must be at least 1 (1 = the single-max control), got {ties}")
    if ties >= c.keys:
        raise FlashprobeError(f"--ties ({ties}) must be below --keys ({c.keys}): rows need a tail")
    if c.tie_placement == "tile" and ties > min(TIE_GROUP, c.keys):
        raise FlashprobeError(
            f"--ties {ties} does not fit one aligned group of {TIE_GROUP} keys; "
            "use --tie-placement anywhere"
        )


def rows_per_block(c: BiasConfig, ties: int) -> int:
    # rows of one block need disjoint tied keys: one aligned group each, or `ties` keys each
    capacity = max(1, c.keys // TIE_GROUP) if c.tie_placement == "tile" else c.keys // ties
    return max(1, min(ROWS_PER_BLOCK, capacity, c.rows))


def _num(x: float) -> str:
    return f"{x:g}"
