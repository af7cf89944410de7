"""Summaries of replay results that the report and the ranking read: per-variant metrics pooled
over source cells, layers, heads and steps, and the (layer, head) hot spots of the bias."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

MEAN_METRICS = (
    "dq_rel", "dk_rel", "dv_rel", "wq_rel", "wk_rel", "o_abs", "key_shift_leak",
    "key_shift_drift", "softmax_sum_bias", "tied_rows", "softmax_sum_bias_tied",
    "softmax_sum_bias_untied", "softmax_sum_tied_share",
)  # fmt: skip
#: Relative errors pooled over heads by each head's exact norm where the records carry it
#: (`<name>_ref_norm`), so a head whose exact gradient is tiny cannot dominate the summary.
POOLED_METRICS = ("dq_rel", "dk_rel")


def summarise(docs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant over every source, step, layer and head (error = variant − fp64 golden):

    delta_bias   Σ_{source,layer,head} |Σ_steps Σ_tokens δ error| / tokens: the δ error that
                 survives summation (a bias), per token; the quantity a ranking removes
    o_bias       the same for the mean O error (O error summed over tokens and D, / D)
    delta_t_max  the (layer, head, step) δ t-statistic largest in magnitude, with its sign
    dq_rel, dk_rel   the relative error of every record's gradient together (pooled by the
                 exact norms, pooled_relative_error); the mean over records for older
                 replays without the norms
    *_rel, o_abs, key_shift_*, softmax_sum_*, tied_rows   means over records (where the
                 softmax-sum bias sits: mechanism.softmax_sum_record)
    *_coherence, *_similarity, growth_exponent   means over (source, layer, head) series
    counts       per replayed row
    """
    acc: dict[str, dict[str, Any]] = {}
    for doc in docs:
        source = doc.get("source_cell")
        for rec in doc.get("records", []):
            a = acc.setdefault(rec["variant"], _empty())
            key = (source, rec["layer"], rec["head"])
            a["delta_cum"][key] = a["delta_cum"].get(key, 0.0) + rec["delta_sum"]
            a["o_cum"][key] = a["o_cum"].get(key, 0.0) + rec["o_mean"] * rec["rows"]
            a["rows"] += rec["rows"]
            a["n"] += 1
            for name in MEAN_METRICS:
                a[name].append(rec.get(name))
            for name in POOLED_METRICS:
                norm = rec.get(f"{name.removesuffix('_rel')}_ref_norm")
                a["pooled"].setdefault(name, []).append((rec.get(name), norm))
            for name in ("tie_events", "p_bar_ones"):
                if rec.get(name) is not None:
                    a[name] += rec[name]
                    a[name + "_rows"] += rec["rows"]
            t = rec.get("delta_t")
            if (
                t is not None
                and t == t
                and (a["delta_t_max"] is None or abs(t) > abs(a["delta_t_max"]))
            ):
                a["delta_t_max"] = t
            if "matches_capture" in rec:
                a["matches"].append(bool(rec["matches_capture"]))
        for s in doc.get("series", []):
            a = acc.setdefault(s["variant"], _empty())
            for name in (
                "delta_coherence", "wq_coherence", "wk_coherence", "wq_direction_similarity",
                "wk_direction_similarity", "wq_rank1_share", "growth_exponent",
            ):  # fmt: skip
                a["series"].setdefault(name, []).append(s.get(name))
            a["max_steps"] = max(a["max_steps"], len(s.get("steps", [])))
    out = {}
    for variant, a in acc.items():
        rows = a["rows"] or 1
        row = {
            "replayed_rows": a["rows"],
            "steps": a["max_steps"],
            "delta_bias": sum(abs(v) for v in a["delta_cum"].values()) / rows,
            "o_bias": sum(abs(v) for v in a["o_cum"].values()) / rows,
            "delta_t_max": a["delta_t_max"],
            "tie_events_per_row": _per(a, "tie_events"),
            "p_bar_ones_per_row": _per(a, "p_bar_ones"),
            "matches_capture": all(a["matches"]) if a["matches"] else None,
        }
        for name in MEAN_METRICS:
            row[name] = _mean(a[name])
        for name, pairs in a["pooled"].items():
            finite = [(e, n) for e, n in pairs if _finite(e)]
            if finite and all(_finite(n) for _, n in finite):
                row[name] = pooled_relative_error(finite)
        for name, values in a["series"].items():
            row[name] = _mean(values)
        out[variant] = row
    return out


def hot_spots(docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (variant, layer, head) over sources and steps: δ bias, combined t (Stouffer: Σt/√n
    over steps and sources), cumulative δ error and coherence, O bias, tie and P̄ = 1 counts."""
    acc: dict[tuple[str, int, int], dict[str, Any]] = {}
    for doc in docs:
        for rec in doc.get("records", []):
            key = (rec["variant"], rec["layer"], rec["head"])
            a = acc.setdefault(key, {"rows": 0, "dsum": 0.0, "osum": 0.0, "t": [], "ties": 0.0,
                                     "ones": 0.0})  # fmt: skip
            a["rows"] += rec["rows"]
            a["dsum"] += rec["delta_sum"]
            a["osum"] += rec["o_mean"] * rec["rows"]
            if rec.get("delta_t") is not None and math.isfinite(rec["delta_t"]):
                a["t"].append(rec["delta_t"])
            a["ties"] += rec.get("tie_events") or 0.0
            a["ones"] += rec.get("p_bar_ones") or 0.0
        for s in doc.get("series", []):
            key = (s["variant"], s["layer"], s["head"])
            if key in acc:
                acc[key].setdefault("coh", []).append(s.get("delta_coherence"))
                acc[key].setdefault("wcoh", []).append(s.get("wq_coherence"))
    out = []
    for (variant, layer, head), a in acc.items():
        rows = a["rows"] or 1
        ts = a["t"]
        out.append(
            {
                "variant": variant,
                "layer": layer,
                "head": head,
                "delta_mean": a["dsum"] / rows,
                "delta_t": sum(ts) / math.sqrt(len(ts)) if ts else None,
                "delta_cumsum": a["dsum"],
                "delta_coherence": _mean(a.get("coh", [])),
                "wq_coherence": _mean(a.get("wcoh", [])),
                "o_mean": a["osum"] / rows,
                "tie_events_per_row": a["ties"] / rows,
                "p_bar_ones_per_row": a["ones"] / rows,
            }
        )
    return out


def _empty() -> dict[str, Any]:
    return {
        "delta_cum": {}, "o_cum": {}, "rows": 0, "n": 0, "delta_t_max": None, "matches": [],
        **{name: [] for name in MEAN_METRICS},
        "tie_events": 0.0, "tie_events_rows": 0, "p_bar_ones": 0.0, "p_bar_ones_rows": 0,
        "series": {}, "max_steps": 0, "pooled": {},
    }  # fmt: skip


def pooled_relative_error(parts: Sequence[tuple[Any, Any]]) -> float | None:
    """The relative error of several tensors together, from each one's (relative error, exact
    norm): √(Σ (rel·norm)²) / √(Σ norm²); the mean of the errors when a norm is missing;
    None when an error is missing or not finite, or every norm is 0."""
    errors = [rel for rel, _ in parts]
    if not errors or any(not _finite(e) for e in errors):
        return None
    norms = [norm for _, norm in parts]
    if not all(_finite(n) for n in norms):
        return sum(errors) / len(errors)
    total = sum(n * n for n in norms)
    if total == 0:
        return None
    return math.sqrt(sum((e * n) ** 2 for e, n in zip(errors, norms, strict=True)) / total)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _per(a: Mapping[str, Any], name: str) -> float | None:
    rows = a[name + "_rows"]
    return a[name] / rows if rows else None


def _mean(values: Sequence[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(vals) / len(vals) if vals else None
