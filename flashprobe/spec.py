"""KernelSpec: one frozen description of a flash-attention variant.

The same spec object flows unchanged from YAML or CLI flags to the PyTorch emulator
(`flashprobe.reference`) and the Triton kernels (`flashprobe.kernels`). Every field names one
component that the paper (arXiv:2510.04212) or its readers suspect of causing BF16 training
failures; each is a switch with a documented rounding point.

"bf16" in a precision field means "the 16-bit dtype of the inputs": with fp16 inputs the same
switch rounds to fp16. "fp32" keeps the quantity in fp32.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from flashprobe.config_tools import short_repr
from flashprobe.errors import FlashprobeError
from flashprobe.yaml_io import load_yaml, read_yaml

Precision = Literal["bf16", "fp32"]
SoftmaxMode = Literal["standard", "stabilized", "fused_scale"]
DeltaSource = Literal["o_lowp", "o_fp32", "o_recompute", "dp_p"]
MaskedTiles = Literal["skip", "release"]

#: Spellings of "one tile spanning the whole sequence" accepted for block_m / block_n.
UNTILED_WORDS = ("full", "untiled", "none", "null")
#: block_m: None lets the kernel choose its query tile; printed "auto", read back as None.
AUTO_WORD = "auto"
MIN_BLOCK = 16  # tl.dot needs at least 16 along every dimension
MAX_BLOCK = 1 << 16

FIELD_DOCS: dict[str, str] = {
    "block_m": "Query rows per tile; auto (null) lets the kernel choose. Numerically inert in the "
    "forward (rows are independent); the Triton kernel uses it as its query tile when it is "
    "at most 128 (larger tiles do not fit in registers) and picks its own otherwise.",
    "block_n": "Key columns per tile of the online softmax; full (null) means one tile "
    "spanning the whole sequence (the paper's 'untiled' ablation). Changes where m is "
    "updated, so it changes P̄ and its rounding.",
    "score_precision": "S = scale·QKᵀ kept in fp32, or rounded to bf16 before the row max and "
    "exp (the paper's code computes S with a bf16 einsum under autocast). Rounding to bf16 "
    "turns near-ties into exact ties.",
    "softmax": "Safe-softmax mode. standard: P̄ = exp(S − m) with m the running row max, so the "
    "max entry's P̄ is exactly 1. stabilized: the paper's dynamic maximum: when a tile row has "
    "more than one score within tie_tolerance of its max r, use m' = beta·r if r > 0 and 0 if "
    "r < 0, so no P̄ equals 1. fused_scale: the scale is fused into the subtraction as one FMA "
    "(Triton tutorial's unmasked stage, FA2 CUDA), so the max entry's P̄ may differ from 1.",
    "beta": "Stabilized mode's shift factor for a positive tied maximum (> 1; paper: 2 in v4, "
    "7 in v2; range 2-8).",
    "tie_tolerance": "Stabilized mode: scores within this distance of the tile row max count "
    "as tied (>= 0; the paper's code uses 1e-3).",
    "p_bar_precision": "P̄ rounded to bf16 before the P̄V product (FA2, Triton tutorial, the "
    "paper's code) or kept in fp32.",
    "accumulator": "Running O and ℓ between key tiles: fp32 (FlashAttention-2/3, Triton "
    "tutorial) or bf16 (the paper's released PyTorch code, which also rounds each tile's P̄V "
    "product to bf16).",
    "l_accumulator": "The running ℓ alone, when it should differ from `accumulator` (null: "
    "as `accumulator`): an ablation that tells the running O from the running ℓ. A bf16 ℓ drops "
    "the tail of rows whose max has P̄ = 1, so the softmax the backward recomputes sums to more "
    "than 1 (`flashprobe bias`, column ΣP−1).",
    "l_from_rounded_p": "Sum ℓ from the rounded P̄ used in P̄V (consistent numerator and "
    "denominator) instead of the unrounded fp32 P̄ (the tutorial and FA2; FA PR #2721).",
    "delta_source": "Backward δ: o_lowp = rowsum(dO∘O) from the stored 16-bit O (FA2/FA3, "
    "tutorial); o_fp32 = from an fp32 O kept by the forward; o_recompute = from O recomputed "
    "as PV in fp32 in the backward; dp_p = rowsum(dP∘P).",
    "delta_precision": "δ kept in fp32 after its reduction, or rounded to bf16 (the paper's "
    "code reduces bf16 tensors).",
    "ds_precision": "dS = P∘(dP − δ) rounded to bf16 before the dQ and dK products (FA2, "
    "tutorial) or kept in fp32.",
    "row_sum_floor": "Clamp each key tile's row sum (its share of ℓ) from below at this value, "
    "rounded to bf16, before it enters the running ℓ (null: no clamp). The paper's released "
    "kernel clamps at 1e-10 (`.clamp(min=EPSILON)`): where the stabilized shift β·r drives a "
    "tile's sum below it, O = P̄V/ℓ shrinks instead of becoming 0/0 = NaN, and lse (so the "
    "backward's P) carries the clamped ℓ. Set in paper-sfa; the release clamps without STABLE "
    "too, where ℓ >= 1 makes it inert, so paper-code leaves it off.",
    "row_sum_bias": "Divide the final ℓ by (1 + this) before O = acc/ℓ and lse (0: off), so the "
    "softmax the backward recomputes from lse sums to 1 + this on every row. No released "
    "kernel does this: an injected, uniform softmax-sum bias (ΣP − 1), to test whether the bias "
    "a bf16 running ℓ leaves (+1e-4 to +3e-4 in the AdamW runs, only on some rows) is enough "
    "on its own to explode training. |value| < 0.1.",
    "masked_tiles": "Causal key tiles that lie wholly past a row (every key after it). skip: "
    "the row never visits them (FA2, the Triton tutorial). release: each one acts on the row "
    "as in the paper's released kernel, which runs every key tile with the mask filled in "
    "with −max: all its scores tie at the fill, so stabilized softmax raises the running max "
    "to max(m, 0) (rescaling O and ℓ), and its row sum 0 is clamped to row_sum_floor and added "
    "to ℓ (halving O on a row whose ℓ sat at the floor). paper-sfa sets release; the other "
    "presets skip.",
}


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One flash-attention variant. Build with `make_spec`; instances are always valid."""

    block_m: int | None = None
    block_n: int | None = 64
    score_precision: Precision = "fp32"
    softmax: SoftmaxMode = "standard"
    beta: float = 2.0
    tie_tolerance: float = 1e-3
    p_bar_precision: Precision = "bf16"
    accumulator: Precision = "fp32"
    l_accumulator: Precision | None = None
    l_from_rounded_p: bool = False
    delta_source: DeltaSource = "o_lowp"
    delta_precision: Precision = "fp32"
    ds_precision: Precision = "bf16"
    row_sum_floor: float | None = None
    masked_tiles: MaskedTiles = "skip"
    row_sum_bias: float = 0.0

    def __post_init__(self) -> None:
        _validate(self)
        # The spec as canonical JSON, fixed at construction: kernels.ops passes it to its
        # custom ops, and torch.compile reads a plain attribute where it could not call a
        # function on a frozen dataclass. Not a field: equality, hashing and to_dict ignore it.
        object.__setattr__(self, "json", json.dumps(self.to_dict(), sort_keys=True))

    # -- derived views ------------------------------------------------------------------
    @property
    def untiled(self) -> bool:
        return self.block_n is None

    @property
    def stabilized(self) -> bool:
        return self.softmax == "stabilized"

    @property
    def l_precision(self) -> Precision:
        """The running ℓ's precision: l_accumulator, or the accumulator's when unset."""
        return self.l_accumulator or self.accumulator

    def replace(self, **overrides: Any) -> KernelSpec:
        """A new spec with some fields changed (validated, values parsed as in YAML)."""
        return make_spec(self, overrides)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict; a field added later is left out while it is off (its default),
        so the JSON, `key()` and stored configs of every spec that does not use it stay as they
        were (a spec rebuilt from such a dict gets the same default back)."""
        out = dataclasses.asdict(self)
        for name, off in OMITTED_WHEN_OFF.items():
            if out[name] == off:
                del out[name]
        return out

    def key(self) -> str:
        """Stable short hash of the numerics-relevant fields (for caches and result stores)."""
        return hashlib.sha256(self.json.encode()).hexdigest()[:12]

    def describe(self, base: KernelSpec | str | None = None) -> str:
        """A compact label: the closest preset plus the fields that differ from it."""
        if base is None:
            base = min(PRESETS, key=lambda name: len(self.diff(PRESETS[name])))
        base_name = base if isinstance(base, str) else "spec"
        base_spec = PRESETS[base] if isinstance(base, str) else base
        changes = self.diff(base_spec)
        if not changes:
            return base_name
        return base_name + "+" + ",".join(f"{k}={_fmt(v, k)}" for k, v in changes.items())

    def diff(self, other: KernelSpec) -> dict[str, Any]:
        """Fields whose value differs from `other` (this spec's values)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        }


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(KernelSpec))
#: Fields that `to_dict` (hence `json` and `key()`) leaves out while they hold this (off) value.
OMITTED_WHEN_OFF: dict[str, Any] = {
    "row_sum_floor": None,
    "masked_tiles": "skip",
    "row_sum_bias": 0.0,
}


# -- construction ---------------------------------------------------------------------------
def make_spec(
    base: KernelSpec | str | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> KernelSpec:
    """Build a spec from a preset name, a spec, or a mapping, plus field overrides.

    A mapping may name a `preset` to start from (default fa2) and any fields to override, as in
    YAML: ``{"preset": "fa2", "softmax": "stabilized", "beta": 4}``.
    """
    fields: dict[str, Any] = {}
    if base is None:
        start = PRESETS["fa2"]
    elif isinstance(base, KernelSpec):
        start = base
    elif isinstance(base, str):
        start = preset(base)
    elif isinstance(base, Mapping):
        body = dict(base)
        start = preset(body.pop("preset", "fa2"))
        fields.update(body)
    else:
        raise FlashprobeError(f"kernel spec must be a preset name or a mapping, got {base!r}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise FlashprobeError(f"overrides must be a mapping of fields, got {overrides!r}")
    fields.update(overrides or {})
    if not fields:
        return start  # frozen and already validated: no copy (a per-call path of `attention`)
    unknown = sorted(set(fields) - set(FIELD_NAMES), key=str)  # keys of any type: 1 and 'x'
    if unknown:
        raise FlashprobeError(
            f"unknown kernel spec field {unknown[0]!r}; known fields: {', '.join(FIELD_NAMES)}"
        )
    parsed = {name: _parse_field(name, value) for name, value in fields.items()}
    try:
        return dataclasses.replace(start, **parsed)
    except TypeError as exc:  # pragma: no cover - guarded by the unknown-field check
        raise FlashprobeError(str(exc)) from None


def preset(name: str) -> KernelSpec:
    if not isinstance(name, str) or name not in PRESETS:
        raise FlashprobeError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name]


def resolve_spec(spec: KernelSpec | str | Mapping[str, Any] | None) -> KernelSpec:
    """Accept what users pass as `spec=` (a spec, a preset name, a mapping or None → fa2)."""
    return spec if isinstance(spec, KernelSpec) else make_spec(spec)


def parse_assignments(assignments: Iterable[str], *, unique: bool = False) -> dict[str, Any]:
    """Parse CLI ``key=value`` strings; values are read as YAML scalars (4 → int, true → bool).
    A repeated key: the last one wins (`--set` overrides), or, with `unique`, an error (one
    `--variant` string, where `beta=3,beta=4` is a typo, not an override)."""
    out: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise FlashprobeError(f"expected key=value, got {item!r}")
        if unique and key.strip() in out:
            raise FlashprobeError(f"{key.strip()!r} given twice")
        try:
            out[key.strip()] = load_yaml(raw) if raw.strip() else None
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


def split_variant(text: str, presets: Iterable[str] | None = None) -> tuple[str, dict[str, Any]]:
    """`PRESET` or `PRESET:KEY=VALUE[,KEY=VALUE...]` (the `--variant` strings of `bias` and
    `logit-scale`, and `spec`'s argument) as (PRESET, assignments); a key given twice is an
    error. PRESET is checked against `presets` when given (first: a wrong name is the more
    likely slip); the keys are not checked here: each command knows which it takes."""
    text = text.strip()
    base, sep, rest = text.partition(":")
    base = base.strip()
    if presets is not None:
        known = list(presets)
        if not base:
            raise FlashprobeError(f"variant {text!r}: expected PRESET or PRESET:KEY=VALUE,...")
        if base not in known:
            raise FlashprobeError(
                f"variant {text!r}: unknown preset {base!r}; choose one of: {', '.join(known)}"
            )
    items = rest.split(",") if sep else []
    if sep and not rest.strip():
        raise FlashprobeError(f"variant {text!r}: nothing after ':'")
    if any(not item.strip() for item in items):  # `a=1,,b=2`, `a=1,`: a field lost in a typo?
        raise FlashprobeError(f"variant {text!r}: an empty KEY=VALUE between commas")
    try:
        return base, parse_assignments(items, unique=True)
    except FlashprobeError as exc:
        raise FlashprobeError(f"variant {text!r}: {exc}") from None


def spec_from_yaml(path: str | Path) -> KernelSpec:
    """Load a spec from a YAML file holding a mapping (optionally under a `kernel:` key)."""
    return make_spec(spec_fields_from_yaml(path))


def spec_fields_from_yaml(path: str | Path) -> dict[str, Any]:
    """The kernel spec mapping of a YAML file, or of its `kernel:` key (the file may hold other
    settings beside it, e.g. a suite's variant), unresolved.

    A spec field beside `kernel:` (`beta: 4`) is refused rather than dropped: it would
    silently lose to the mapping."""
    path = Path(path)
    data = read_yaml(path, "spec")
    if isinstance(data, Mapping) and "kernel" in data:
        beside = sorted(k for k in map(str, data) if k in FIELD_NAMES or k == "preset")
        if beside:
            raise FlashprobeError(
                f"{path}: spec fields both under kernel: and beside it ({', '.join(beside)}): "
                "give them in one place"
            )
        data = data["kernel"]
        if not isinstance(data, Mapping):
            raise FlashprobeError(
                f"{path}: kernel: must be a mapping of kernel spec fields, got {short_repr(data)}"
            )
    if not isinstance(data, Mapping):
        raise FlashprobeError(f"{path}: expected a mapping of kernel spec fields")
    return dict(data)


# -- parsing and validation -----------------------------------------------------------------
def _parse_field(name: str, value: Any) -> Any:
    if name in ("block_m", "block_n"):
        words = (*UNTILED_WORDS, AUTO_WORD) if name == "block_m" else UNTILED_WORDS
        if value is None or (isinstance(value, str) and value.lower() in words):
            return None
        return _as_int(name, value)
    if name in ("beta", "tie_tolerance", "row_sum_bias"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FlashprobeError(f"{name} must be a number, got {value!r}")
        return float(value)
    if name == "row_sum_floor":
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "off")):
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FlashprobeError(f"{name} must be a number or null, got {value!r}")
        return float(value)
    if name == "l_from_rounded_p":
        if not isinstance(value, bool):
            raise FlashprobeError(f"{name} must be true or false, got {value!r}")
        return value
    return value  # Literal fields are checked in _validate


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FlashprobeError(f"{name} must be a power of two or 'full', got {value!r}")
    return value


def _validate(spec: KernelSpec) -> None:
    for name in ("block_m", "block_n"):
        value = getattr(spec, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise FlashprobeError(f"{name} must be a power of two or 'full', got {value!r}")
        if value < MIN_BLOCK or value > MAX_BLOCK or value & (value - 1):
            raise FlashprobeError(
                f"{name} must be a power of two between {MIN_BLOCK} and {MAX_BLOCK} or 'full', "
                f"got {value}"
            )
    for name, allowed in (
        ("score_precision", Precision),
        ("softmax", SoftmaxMode),
        ("p_bar_precision", Precision),
        ("accumulator", Precision),
        ("delta_source", DeltaSource),
        ("delta_precision", Precision),
        ("ds_precision", Precision),
        ("masked_tiles", MaskedTiles),
    ):
        choices = get_args(allowed)
        if getattr(spec, name) not in choices:
            raise FlashprobeError(
                f"{name} must be one of {', '.join(choices)}, got {getattr(spec, name)!r}"
            )
    if spec.l_accumulator not in (None, *get_args(Precision)):
        raise FlashprobeError(
            f"l_accumulator must be null or one of {', '.join(get_args(Precision))}, "
            f"got {spec.l_accumulator!r}"
        )
    if isinstance(spec.beta, bool) or not isinstance(spec.beta, int | float):
        raise FlashprobeError(f"beta must be a number, got {spec.beta!r}")
    if not (math.isfinite(spec.beta) and spec.beta > 1.0):
        raise FlashprobeError(f"beta must be a finite number > 1, got {spec.beta}")
    tol = spec.tie_tolerance
    if isinstance(tol, bool) or not isinstance(tol, int | float):
        raise FlashprobeError(f"tie_tolerance must be a number, got {tol!r}")
    if not (math.isfinite(tol) and tol >= 0.0):
        raise FlashprobeError(f"tie_tolerance must be a finite number >= 0, got {tol}")
    floor = spec.row_sum_floor
    if floor is not None:
        if isinstance(floor, bool) or not isinstance(floor, int | float):
            raise FlashprobeError(f"row_sum_floor must be a number or null, got {floor!r}")
        if not (math.isfinite(floor) and floor > 0.0):
            raise FlashprobeError(f"row_sum_floor must be a finite number > 0 or null, got {floor}")
    bias = spec.row_sum_bias
    if isinstance(bias, bool) or not isinstance(bias, int | float):
        raise FlashprobeError(f"row_sum_bias must be a number, got {bias!r}")
    if not (math.isfinite(bias) and abs(bias) < 0.1):
        raise FlashprobeError(f"row_sum_bias must be finite with |value| < 0.1, got {bias}")
    if not isinstance(spec.l_from_rounded_p, bool):
        raise FlashprobeError(
            f"l_from_rounded_p must be true or false, got {spec.l_from_rounded_p!r}"
        )
    if spec.softmax == "fused_scale" and spec.score_precision != "fp32":
        raise FlashprobeError(
            "softmax 'fused_scale' fuses the scale into the raw fp32 scores; "
            "it needs score_precision 'fp32'"
        )


def _fmt(value: Any, key: str = "block_n") -> str:
    if value is None:
        return {"block_m": AUTO_WORD, "block_n": "full"}.get(key, "null")
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def format_field(key: str, value: Any) -> str:
    """A field's value as YAML and labels write it, and `--set FIELD=VALUE` reads back (None:
    "auto" for block_m, "full" for block_n, else "null")."""
    return _fmt(value, key)


# -- presets ------------------------------------------------------------------------------
PRESETS: dict[str, KernelSpec] = {}


def _register(name: str, spec: KernelSpec) -> None:
    PRESETS[name] = spec


# FlashAttention-2 / Triton tutorial semantics in bf16: fp32 S, m, ℓ and acc_O; P̄ and dS cast
# to bf16 for the matrix products; δ from the stored bf16 O.
_register("fa2", KernelSpec())
# The paper's released pure-PyTorch flash attention (512×512 tiles, bf16 einsum scores, bf16
# running O/ℓ/m buffers, δ reduced from bf16 O and dO).
_register(
    "paper-code",
    KernelSpec(
        block_m=512,
        block_n=512,
        score_precision="bf16",
        accumulator="bf16",
        delta_precision="bf16",
    ),
)
# The paper's stabilized flash attention (Alg. 3, β = 2 as in v4) on the fa2 kernel.
_register("sfa", KernelSpec(softmax="stabilized", beta=2.0))
# The paper's own code with STABLE=1, including its clamp of each tile's row sum at 1e-10 and
# its causal key tiles run even where wholly masked for a row.
_register(
    "paper-sfa",
    dataclasses.replace(
        PRESETS["paper-code"], softmax="stabilized", row_sum_floor=1e-10, masked_tiles="release"
    ),
)
# High precision everywhere a kernel can choose.
_register(
    "fp32",
    KernelSpec(
        p_bar_precision="fp32",
        delta_source="o_fp32",
        ds_precision="fp32",
        l_from_rounded_p=True,
    ),
)

PRESET_DOCS: dict[str, str] = {
    "fa2": "FlashAttention-2 / Triton tutorial semantics in bf16 (fp32 S, m, ℓ, O; bf16 P̄, dS).",
    "paper-code": "The paper's released PyTorch kernel: bf16 scores and accumulators, 512×512 "
    "tiles, bf16 δ.",
    "sfa": "The paper's stabilized flash attention (β = 2) on the fa2 kernel.",
    "paper-sfa": "The paper's released kernel with STABLE=1 (β = 2), tile row sums clamped at "
    "1e-10 and wholly masked causal tiles run, as released.",
    "fp32": "High precision everywhere: fp32 P̄, dS, δ from an fp32 O.",
}
