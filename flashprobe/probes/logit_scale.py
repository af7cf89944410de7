"""`flashprobe logit-scale`: how far each variant's attention output and gradients are from fp64
as the attention logits grow.

Training runs that explode have logits in the thousands (docs/findings.md). This probe asks what
each kernel computes there: for every target max logit L it draws q, k ~ N(0, 1), scales both so
that the largest visible |scale·q·kᵀ| of each head is L, rounds them to bf16 (V, dO ~ N(0, 1) in
bf16 too), runs each variant through the reference emulator (forward and backward) and measures
the relative L2 error of O, δ, dQ, dK and dV against the fp64 golden on the same bf16 inputs,
and the cosine between the variant's dQ and the golden's.
The same-dtype PyTorch attention (`numerics.gate.reference_attention`: scores, softmax and
output each rounded to bf16) is measured beside them as `torch-bf16`, the reference of the
project's error gate. Gaussian scores are a clean, reproducible stand-in for a trained model's:
every row has one clear maximum, so the exact gradient is small and an error that spreads
probability over keys shows up in full.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from flashprobe.errors import FlashprobeError
from flashprobe.numerics.gate import reference_attention, reference_grads, rel_l2
from flashprobe.reference.emulator import emulate_forward
from flashprobe.reference.emulator_backward import emulate_backward
from flashprobe.reference.golden import golden_backward, golden_forward
from flashprobe.reference.threads import measurement_threads
from flashprobe.spec import PRESETS, KernelSpec, make_spec, split_variant

#: The quantities compared with the fp64 golden, in table order: relative L2 errors, then the
#: cosine between the variant's dQ and the golden's (1: the error only rescales it; lower: the
#: gradient points elsewhere).
ERRORS = ("o", "delta", "dq", "dk", "dv")
QUANTITIES = (*ERRORS, "dq_cos")
#: The same-dtype PyTorch attention, measured beside the variants.
TORCH_REFERENCE = "torch-bf16"
DEFAULT_LOGITS = (10.0, 100.0, 1000.0, 4000.0)
DEFAULT_VARIANTS = ("fa2", "paper-code", "sfa", "paper-sfa", "fp32")
#: Larger problems than this many score elements per head would take minutes on a CPU.
MAX_SCORES_PER_HEAD = 1 << 24
#: Elements of the largest fp64 tensor (heads × seq × max(seq, head_dim)): 2 GiB; more would
#: fail in the allocator with a traceback, or swap.
MAX_ELEMENTS = 1 << 28


@dataclass(frozen=True)
class LogitScaleConfig:
    """What `flashprobe logit-scale` measures; `variants` maps a name to its KernelSpec."""

    variants: Mapping[str, KernelSpec]
    logits: tuple[float, ...] = DEFAULT_LOGITS
    seeds: tuple[int, ...] = (0,)
    seq: int = 1024
    heads: int = 4
    head_dim: int = 64
    causal: bool = True

    def __post_init__(self) -> None:
        if not self.variants:
            raise FlashprobeError("logit-scale needs at least one variant")
        # a logit beyond fp32's range has no score to hold it (the kernels' S is fp32)
        top = torch.finfo(torch.float32).max
        if not self.logits or any(not (0 < x < top) for x in self.logits):
            raise FlashprobeError(
                f"--logits must be positive numbers below {top:.2g} (fp32 scores), "
                f"got {list(self.logits)}"
            )
        if not self.seeds:
            raise FlashprobeError("--seed needs at least one seed")
        if any(not 0 <= seed < 2**63 for seed in self.seeds):
            raise FlashprobeError(f"--seed must be in [0, 2**63), got {list(self.seeds)}")
        if self.seq < 2:
            raise FlashprobeError(f"--seq must be at least 2, got {self.seq}")
        if self.heads < 1:
            raise FlashprobeError(f"--heads must be at least 1, got {self.heads}")
        if self.head_dim < 1 or self.head_dim & (self.head_dim - 1):
            raise FlashprobeError(f"--head-dim must be a power of two, got {self.head_dim}")
        if self.seq * self.seq > MAX_SCORES_PER_HEAD:
            raise FlashprobeError(
                f"--seq {self.seq} is too long for the CPU emulator (at most "
                f"{math.isqrt(MAX_SCORES_PER_HEAD)})"
            )
        elements = self.heads * self.seq * max(self.seq, self.head_dim)
        if elements > MAX_ELEMENTS:
            raise FlashprobeError(
                f"--heads × --seq × max(--seq, --head-dim) = {elements:,} is too large for the "
                f"CPU emulator (at most {MAX_ELEMENTS:,}); lower --heads, --seq or --head-dim"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "variants": {name: spec.to_dict() for name, spec in self.variants.items()},
            "logits": list(self.logits),
            "seeds": list(self.seeds),
            "seq": self.seq,
            "heads": self.heads,
            "head_dim": self.head_dim,
            "causal": self.causal,
        }


@dataclass(frozen=True)
class ScaleRow:
    """One variant at one target logit: its error per quantity, per seed and averaged."""

    variant: str
    target_logit: float
    max_logit: float  # the largest visible |logit| of the bf16 inputs, over seeds
    errors: dict[str, list[float | None]]  # quantity → one relative L2 error per seed

    def mean(self, quantity: str) -> float | None:
        values = self.errors[quantity]
        if any(v is None for v in values):
            return None
        return sum(values) / len(values)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "variant": self.variant,
            "target_logit": self.target_logit,
            "max_logit": self.max_logit,
        }
        row.update({q: self.mean(q) for q in QUANTITIES})
        row["per_seed"] = self.errors
        return row


@dataclass(frozen=True)
class LogitScaleReport:
    config: LogitScaleConfig
    rows: list[ScaleRow]
    environment: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
            "environment": self.environment,
            "method": __doc__.split("\n\n")[1] if __doc__ else "",
        }


def parse_variant(text: str) -> tuple[str, KernelSpec]:
    """`PRESET` or `PRESET:FIELD=VALUE[,FIELD=VALUE...]` (values read as YAML scalars), checked
    as `make_spec` checks a preset and its fields."""
    base, fields = split_variant(text, PRESETS)
    try:
        return text.strip(), make_spec(base, fields)
    except FlashprobeError as exc:
        raise FlashprobeError(f"variant {text.strip()!r}: {exc}") from None


def suite_variants(config: str) -> tuple[dict[str, KernelSpec], list[str]]:
    """The kernel of every variant of a suite file (a path or a bundled name), as `ablate`
    expands it (a variant whose kernel differs between grid points: one entry per point,
    `VARIANT @ key=value`), and the variants left out: those whose layers do not all run one
    flashprobe kernel (PyTorch attention, or different kernels per layer)."""
    from flashprobe.attribution.replay_variants import layer_groups, suite_file_variants
    from flashprobe.suites.suite import point_label

    kernels: dict[str, KernelSpec] = {}
    left_out: list[str] = []
    for name, variant in suite_file_variants(config).items():
        per_point: dict[str, KernelSpec] = {}
        for point in dict.fromkeys(run.point for run in variant.runs):
            groups = layer_groups(variant.model(point)).values()
            specs = {spec for layer in groups for _, spec in layer}
            if None in specs or len(specs) != 1:
                break
            per_point[point_label(point)] = specs.pop()
        else:
            if len(set(per_point.values())) == 1:
                kernels[name] = next(iter(per_point.values()))
            else:
                kernels.update({f"{name} @ {label}": k for label, k in per_point.items()})
            continue
        left_out.append(name)
    return kernels, left_out


def make_inputs(
    target_logit: float, config: LogitScaleConfig, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """bf16 q, k, v, dO [1, heads, seq, head_dim]; each head's largest visible |logit| ≈ target."""
    gen = torch.Generator().manual_seed(seed)
    shape = (1, config.heads, config.seq, config.head_dim)
    q, k, v, do = (torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(4))
    logits = _visible_logits(q, k, config.causal)
    largest = logits.abs().amax(dim=(-2, -1), keepdim=True)
    factor = torch.sqrt(target_logit / largest)  # q and k each scaled by √(L / max)
    return tuple(t.to(torch.bfloat16) for t in (q * factor, k * factor, v, do))  # type: ignore[return-value]


def _visible_logits(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    logits = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        logits = logits.tril()  # hidden entries become 0, which never raises the max |logit|
    return logits


@measurement_threads()
def _errors(
    spec: KernelSpec | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    causal: bool,
    golden: dict[str, torch.Tensor],
) -> dict[str, float | None]:
    if spec is None:  # the same-dtype PyTorch attention
        o, _ = reference_attention(q, k, v, causal=causal)
        dq, dk, dv = reference_grads(q, k, v, do, causal=causal)
        got = {"o": o, "dq": dq, "dk": dk, "dv": dv}
    else:
        fwd = emulate_forward(q, k, v, spec, causal=causal)
        bwd = emulate_backward(q, k, v, fwd.o, do, fwd.lse, spec, causal=causal, o_fp32=fwd.o_fp32)
        got = {"o": fwd.o, "delta": bwd.delta, "dq": bwd.dq, "dk": bwd.dk, "dv": bwd.dv}
    out = {name: rel_l2(got[name], golden[name]) if name in got else None for name in ERRORS}
    return {**out, "dq_cos": _cosine(got["dq"], golden["dq"])}


def _cosine(x: torch.Tensor, golden: torch.Tensor) -> float | None:
    flat = [t.detach().double().flatten() for t in (x, golden)]
    cosine = torch.nn.functional.cosine_similarity(*flat, dim=0).item()
    return cosine if math.isfinite(cosine) else None


def run_logit_scale(config: LogitScaleConfig) -> LogitScaleReport:
    """Every variant (and `torch-bf16`) at every target logit, on every seed."""
    from flashprobe.environment import environment

    env = environment("cpu")  # before measuring: the code as it was when the run started
    kernels: dict[str, KernelSpec | None] = {**config.variants, TORCH_REFERENCE: None}
    rows: list[ScaleRow] = []
    for target in config.logits:
        errors: dict[str, dict[str, list[float | None]]] = {
            name: {q: [] for q in QUANTITIES} for name in kernels
        }
        max_logit = 0.0
        for seed in config.seeds:
            q, k, v, do = make_inputs(target, config, seed)
            max_logit = max(max_logit, _visible_logits(q, k, config.causal).abs().max().item())
            fwd = golden_forward(q, k, v, causal=config.causal)
            bwd = golden_backward(q, k, v, do, causal=config.causal)
            golden = {"o": fwd.o, "delta": bwd.delta, "dq": bwd.dq, "dk": bwd.dk, "dv": bwd.dv}
            for name, spec in kernels.items():
                for quantity, value in _errors(spec, q, k, v, do, config.causal, golden).items():
                    errors[name][quantity].append(value)
        rows += [ScaleRow(name, target, max_logit, errors[name]) for name in kernels]
    return LogitScaleReport(config, rows, env)


def variants_from_options(
    names: Sequence[str], suite_file: str | None
) -> tuple[dict[str, KernelSpec], list[str]]:
    """--variant strings in order, then a suite file's variants (the defaults when neither), and
    the suite's variants left out (`suite_variants`)."""
    if suite_file is not None and not suite_file.strip():
        raise FlashprobeError("--variants-from is empty: name a suite file or a bundled suite")
    chosen: dict[str, KernelSpec] = {}
    for text in names or ([] if suite_file else DEFAULT_VARIANTS):
        name, spec = parse_variant(text)
        chosen[name] = spec
    left_out: list[str] = []
    if suite_file:
        kernels, left_out = suite_variants(suite_file)
        for name, spec in kernels.items():
            if name in chosen and chosen[name] != spec:
                raise FlashprobeError(
                    f"variant {name!r} is named by --variant and by --variants-from "
                    f"{suite_file} with different kernels"
                )
            chosen.setdefault(name, spec)
        if not chosen:  # one line naming why, not a note plus "needs at least one variant"
            raise FlashprobeError(
                f"--variants-from {suite_file}: no variant runs one flashprobe kernel in every "
                f"layer (left out: {', '.join(left_out)})"
            )
    return chosen, left_out
