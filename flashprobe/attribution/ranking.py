"""Rank a suite's components by how much of the failure they explain.

Two designs, both read from the same store (a variant's design follows from its config):

    restore   one factor at a time from the failing baseline: the variant differs from the
              baseline in one component, set to its safe value. If the failure goes away the
              baseline's setting of that component is NECESSARY for the failure (and the change
              is a sufficient fix).
    add       one factor in from the all-safe configuration: the variant differs from the safe
              variant in one component, set to the baseline's unsafe value. If it fails, that
              component is SUFFICIENT for the failure.

A variant's component is its config diff against the reference (KernelSpec fields by name, other
keys dotted; seeds and capture settings ignored), or the suite's explicit `components:` label.
Its design is `restore` when it is at least as close to the baseline as to the safe variant.

Evidence per variant v (reference r: the baseline for restore, the safe variant for add):

    training   p = failed seeds / counted seeds, Wilson 95% interval; Fisher's exact
               two-sided p-value of v's against r's counts; steps to failure over the failed
               seeds (mean, t 95% interval). Failed: the suite's failure rule
               (attribution.failure; by default the run's divergence rule); a seed counts
               once it finished or failed.
               Δp = p_r − p_v (restore: the failure the change removes)
                    p_v − p_r (add: the failure the component brings in)
    mechanism  B = delta_bias of the replay (attribution.replay_summary.summarise: Σ over
               source, layer and head of |δ error summed over tokens and steps| / tokens)
               restore: 1 − B_v / B_baseline (the share of the baseline's biased δ error the
               change removes); add: (B_v − B_safe) / (B_baseline − B_safe)
    score      the mean of Δp and the mechanism share clipped to [−1, 1], over the ones that
               exist; variants are ranked by score, ties by the mechanism share, then by Fisher p.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashprobe.attribution.failure import FailureRule
from flashprobe.errors import FlashprobeError
from flashprobe.spec import PRESETS, format_field, make_spec

METHOD = (
    "score = mean(Δp, mechanism share clipped to [-1, 1]) over those available. restore design "
    "(one factor at a time from the failing baseline): Δp = p_baseline − p_variant, mechanism "
    "share = 1 − B_variant/B_baseline; add design (one factor in from the all-safe variant): "
    "Δp = p_variant − p_safe, share = (B_variant − B_safe)/(B_baseline − B_safe). p = failed/"
    "counted seeds (finished or failed) with a Wilson 95% interval; Fisher's exact two-sided "
    "test against the reference; B = replayed δ bias (Σ over source cell, layer, head of |δ "
    "error summed over tokens and steps| per token, δ error vs the fp64 golden on the "
    "baseline's captures)."
)
SIGNIFICANT = 0.05
SAFE_NAMES = ("safe", "all-safe", "all_safe", "fp32")
BASELINE_NAMES = ("baseline", "fa2")
#: Config keys that never make a component (they differ by design or only record things; a
#: checkpoint's cadence changes no arithmetic of training).
IGNORED_KEYS = ("seed", "train.seed", "train.checkpoint_every", "metrics.capture_layers",
                "metrics.capture_steps", "capture.max_bytes")  # fmt: skip
SPEC_PREFIX = "model.attention.spec."


# -- roles ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Roles:
    baseline: str
    safe: str | None
    components: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "safe": self.safe,
            "components": dict(self.components),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Roles:
        return cls(
            baseline=str(data["baseline"]),
            safe=data.get("safe"),
            components=dict(data.get("components") or {}),
            notes=tuple(data.get("notes") or ()),
        )


def resolve_roles(
    cells: Sequence[Any],
    baseline: str | None = None,
    safe: str | None = None,
    components: Mapping[str, str] | None = None,
    unrun: Collection[str] = (),
) -> Roles:
    """The baseline and safe variants: given, or inferred (and the inference noted).

    Baseline: the common branch source, else a variant named baseline / fa2, else the variant
    whose kernel is the fa2 preset, else the variant that diverged most. Safe: a variant named
    safe / all-safe / fp32, else the variant whose kernel is the fp32 preset; else none (the
    add design is then unavailable). `unrun`: declared variants without runs yet, which a
    given safe may name (its config then comes to `rank` as a reference config).
    """
    variants = list(dict.fromkeys(c.variant for c in cells))
    for name, value in (("baseline", baseline), ("safe", safe)):
        if value is not None and value not in variants and not (name == "safe" and value in unrun):
            raise FlashprobeError(f"no {name} variant {value!r}; variants: {', '.join(variants)}")
    notes = []
    if safe is not None and safe not in variants:
        notes.append(f"safe: {safe} has no run in this suite yet (its config is its declaration): "
                     "add rows unjudged")  # fmt: skip
    if baseline is None:
        sources = {c.branch_from for c in cells if c.branch_from}
        by_name = [v for v in BASELINE_NAMES if v in variants]
        by_spec = [v for v in variants if spec_of(config_of(cells, v)) == PRESETS["fa2"]]
        if len(sources) == 1 and next(iter(sources)) in variants:
            baseline, why = next(iter(sources)), "the branch source"
        elif by_name:
            baseline, why = by_name[0], "by name"
        elif by_spec:
            baseline, why = by_spec[0], "its kernel is the fa2 preset"
        else:
            baseline, why = max(variants, key=lambda v: _rate(cells, v)), "it diverged most"
        notes.append(f"baseline: {baseline} ({why}; set replay.baseline or --baseline)")
    if safe is None:
        by_name = [v for v in SAFE_NAMES if v in variants and v != baseline]
        by_spec = [
            v for v in variants if v != baseline and spec_of(config_of(cells, v)) == PRESETS["fp32"]
        ]
        safe = (by_name or by_spec or [None])[0]
        if safe is not None:
            notes.append(f"safe: {safe} (inferred; set replay.safe or --safe)")
    return Roles(baseline, safe, dict(components or {}), tuple(notes))


# -- components -----------------------------------------------------------------------------
def component_diff(config: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, Any]:
    """What differs from the reference config: KernelSpec fields (by spec.diff, by name) and any
    other key (dotted), with this config's values."""
    out: dict[str, Any] = {}
    mine, theirs = spec_of(config), spec_of(reference)
    if mine is not None and theirs is not None:
        out.update(mine.diff(theirs))
    a, b = _flatten(config), _flatten(reference)
    for key in sorted(set(a) | set(b)):
        if key in IGNORED_KEYS or key.startswith(SPEC_PREFIX) or a.get(key) == b.get(key):
            continue
        out[key] = a.get(key)
    return out


def component_label(diff: Mapping[str, Any]) -> str:
    if not diff:
        return "(identical config)"
    return ", ".join(f"{k}={format_field(k, v)}" for k, v in diff.items())


# -- statistics -----------------------------------------------------------------------------
def wilson_interval(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default); (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def fisher_exact(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided Fisher exact test of k1/n1 vs k2/n2 (sum of tables no more likely than seen)."""
    total, ks = n1 + n2, k1 + k2
    if n1 == 0 or n2 == 0:
        return 1.0

    def prob(a: int) -> float:
        return math.comb(ks, a) * math.comb(total - ks, n1 - a) / math.comb(total, n1)

    seen = prob(k1)
    lo, hi = max(0, ks - n2), min(ks, n1)
    return min(1.0, sum(p for a in range(lo, hi + 1) if (p := prob(a)) <= seen * (1 + 1e-9)))


_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def mean_interval(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high): Student-t 95% interval; no interval below two values."""
    if not values:
        return None, None, None
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    t = _T975[n - 2] if n - 2 < len(_T975) else 1.96
    half = t * sd / math.sqrt(n)
    return mean, mean - half, mean + half


# -- outcomes and the ranked table --------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """Training outcome of one variant over its counted seeds (finished, or failed)."""

    variant: str
    seeds: int
    failed: int
    unfinished: int  # no outcome: cut off before finishing or failing (or ended before the horizon)
    steps: tuple[int, ...]  # the failure step of each failed seed

    @property
    def rate(self) -> float | None:
        return self.failed / self.seeds if self.seeds else None


def outcomes(
    cells: Sequence[Any],
    failed_at: Mapping[Any, int | None] | None = None,
    known: Collection[Any] | None = None,
) -> dict[str, Outcome]:
    """Per variant. `failed_at`: each cell's failure step by its path (attribution.failure);
    None: the divergence step of its summary. `known`: the paths of the cells whose outcome is
    known (attribution.failure.counted); None: the failed and the finished ones."""
    if failed_at is None:
        failed_at = {c.path: FailureRule().step(c.summary, ()) for c in cells}
    if known is None:
        known = {
            c.path for c in cells if c.summary is not None or failed_at.get(c.path) is not None
        }
    out = {}
    for variant in dict.fromkeys(c.variant for c in cells):
        mine = [c for c in cells if c.variant == variant]
        steps = tuple(s for c in mine if (s := failed_at.get(c.path)) is not None)
        counted = [c for c in mine if c.path in known]
        out[variant] = Outcome(variant, len(counted), len(steps), len(mine) - len(counted), steps)
    return out


def rank(
    cells: Sequence[Any],
    roles: Roles,
    mechanism: Mapping[str, Mapping[str, Any]] | None = None,
    failed_at: Mapping[Any, int | None] | None = None,
    rule: FailureRule | None = None,
    known: Collection[Any] | None = None,
    reference_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The ranked table: one row per variant (the references first, unranked). `failed_at`,
    `rule` and `known` as computed by attribution.failure (default: divergence).
    `reference_configs`: the config of a reference without cells (a safe variant not run yet):
    the designs are still told apart. A row whose reference has no outcome is `unjudged` on
    training; a row with nothing to rank by (no Δp, no mechanism share) is left unranked,
    after the ranked ones."""
    mechanism = mechanism or {}
    rule = rule or FailureRule()
    result = outcomes(cells, failed_at, known)
    base_cfg = config_of(cells, roles.baseline)
    safe_cfg = None
    if roles.safe:
        safe_cfg = config_of(cells, roles.safe) or (reference_configs or {}).get(roles.safe)
    b_bias = _bias(mechanism, roles.baseline)
    s_bias = _bias(mechanism, roles.safe) if roles.safe else None
    rows = []
    for variant, out in result.items():
        row = _training_columns(out)
        row["variant"] = variant
        if variant in (roles.baseline, roles.safe):
            row.update(design="baseline" if variant == roles.baseline else "safe", rank=None,
                       component="(reference)", delta_bias=_bias(mechanism, variant))  # fmt: skip
            rows.append(row)
            continue
        cfg = config_of(cells, variant)
        d_base = component_diff(cfg, base_cfg)
        d_safe = component_diff(cfg, safe_cfg) if safe_cfg is not None else None
        design = "restore" if d_safe is None or len(d_base) <= len(d_safe) else "add"
        ref = roles.baseline if design == "restore" else roles.safe
        assert ref is not None
        diff = d_base if design == "restore" else d_safe
        label = roles.components.get(variant) or component_label(diff or {})
        ref_out = result.get(ref) or Outcome(ref, 0, 0, 0, ())
        dp = None
        if out.rate is not None and ref_out.rate is not None:
            dp = ref_out.rate - out.rate if design == "restore" else out.rate - ref_out.rate
        bias = _bias(mechanism, variant)
        share = None
        if bias is not None and b_bias:
            if design == "restore":
                share = 1 - bias / b_bias
            elif s_bias is not None and b_bias != s_bias:
                share = (bias - s_bias) / (b_bias - s_bias)
        parts = [x for x in (dp, None if share is None else max(-1.0, min(1.0, share)))
                 if x is not None]  # fmt: skip
        row.update(
            design=design,
            component=label,
            reference=ref,
            fisher_p=fisher_exact(out.failed, out.seeds, ref_out.failed, ref_out.seeds)
            if out.seeds and ref_out.seeds
            else None,
            delta_p=dp,
            delta_bias=bias,
            mechanism_share=share,
            score=sum(parts) / len(parts) if parts else None,
            unjudged=not ref_out.seeds,  # no training comparison: the reference has no outcome
        )
        row["verdict"] = verdict(row, out, ref_out, rule.noun)
        rows.append(row)
    ranked = sorted(
        (r for r in rows if r["design"] in ("restore", "add") and r["score"] is not None),
        key=lambda r: (
            -(r["score"] if r["score"] is not None else -math.inf),
            -(r["mechanism_share"] if r["mechanism_share"] is not None else -math.inf),
            r["fisher_p"] if r["fisher_p"] is not None else math.inf,  # more seeds first
            r["variant"],
        ),
    )
    for i, r in enumerate(ranked, start=1):
        r["rank"] = i
    refs = [r for r in rows if r["design"] in ("baseline", "safe")]
    unranked = [r for r in rows if r["design"] in ("restore", "add") and r["score"] is None]
    for r in unranked:  # nothing to rank by: no training comparison and no mechanism share
        r["rank"] = None
    return refs + ranked + unranked


def verdict(row: Mapping[str, Any], out: Outcome, ref: Outcome, noun: str = "divergence") -> str:
    """Necessary / sufficient in words (for the failure `noun`), training first, then the
    mechanism."""
    share = row.get("mechanism_share")
    mech_part = ""
    if share is not None:
        if row["design"] == "add":
            mech_part = f"; reproduces {100 * share:.0f}% of the baseline's δ bias"
        elif share >= 0:
            mech_part = f"; removes {100 * share:.0f}% of the baseline's δ bias"
        else:
            mech_part = f"; raises the baseline's δ bias by {-100 * share:.0f}%"
    p = row.get("fisher_p")
    sig = p is not None and p < SIGNIFICANT
    if not ref.seeds:
        train = f"not judged: {ref.variant} has no run with an outcome"
    elif not out.seeds:
        train = "training outcome missing"
    elif row["design"] == "restore":
        if ref.failed == 0:
            train = f"baseline shows no {noun}: training cannot tell"
        elif out.failed < ref.failed * out.seeds / ref.seeds:
            weak = f"less {noun}, not significant (p={p:.2g}, n={out.seeds})"
            train = f"necessary: restoring it prevents {noun}" if sig else weak
        else:
            train = f"not necessary: {noun} still comes"
    else:
        if out.failed == 0:
            train = f"not sufficient: no {noun}"
        elif out.failed * ref.seeds > ref.failed * out.seeds:
            weak = f"more {noun}, not significant (p={p:.2g}, n={out.seeds})"
            train = f"sufficient: it alone brings {noun} to the safe config" if sig else weak
        else:
            train = f"no more {noun} than the safe config"
    return train + mech_part


def _training_columns(out: Outcome) -> dict[str, Any]:
    lo, hi = wilson_interval(out.failed, out.seeds)
    mean, s_lo, s_hi = mean_interval([float(s) for s in out.steps])
    return {
        "seeds": out.seeds,
        "unfinished": out.unfinished,
        "failed": out.failed,
        "rate": out.rate,
        "rate_lo": lo if out.seeds else None,
        "rate_hi": hi if out.seeds else None,
        "steps_mean": mean,
        "steps_lo": s_lo,
        "steps_hi": s_hi,
    }


# -- helpers --------------------------------------------------------------------------------
def config_of(cells: Sequence[Any], variant: str | None) -> Mapping[str, Any]:
    for cell in cells:
        if cell.variant == variant:
            return cell.config
    return {}


def spec_of(config: Mapping[str, Any]) -> Any:
    spec = ((config or {}).get("model") or {}).get("attention") or {}
    spec = spec.get("spec") if isinstance(spec, Mapping) else None
    if spec is None and isinstance(config.get("kernel") if config else None, Mapping | str):
        spec = config["kernel"]  # an unnormalised suite config
    try:
        return make_spec(spec) if spec is not None else None
    except FlashprobeError:
        return None


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out or ({prefix[:-1]: {}} if prefix else {})
    return {prefix[:-1]: data}


def _rate(cells: Sequence[Any], variant: str) -> float:
    done = [c for c in cells if c.variant == variant and c.summary is not None]
    return sum(bool(c.summary.get("diverged")) for c in done) / len(done) if done else -1.0


def _bias(mechanism: Mapping[str, Mapping[str, Any]], variant: str | None) -> float | None:
    value = (mechanism.get(variant) or {}).get("delta_bias") if variant else None
    return float(value) if value is not None else None
