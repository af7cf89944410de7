"""The notes under `flashprobe bias`'s table: sentences read off the measured numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from flashprobe.probes.bias_config import BiasConfig
from flashprobe.probes.bias_result import (
    ROWSUM_FLOOR,
    SHRUNK_BELOW,
    T_SIGNIFICANT,
    VariantResult,
    direction,
    is_biased,
)
from flashprobe.spec import KernelSpec


def make_notes(results: Sequence[VariantResult], c: BiasConfig) -> list[str]:
    """Sentences read off the measured numbers (nothing here is asserted in advance)."""
    notes: list[str] = []

    def rows_of(r: VariantResult) -> tuple[int, float, float]:
        return (r.ties, r.v_mean, r.tail_v_mean)

    def sig(t: float) -> bool:
        return abs(t) >= T_SIGNIFICANT

    def biased(r: VariantResult) -> bool:
        return is_biased(r.excess_t_stat, r.excess_share)

    def short(r: VariantResult) -> str:
        return f"{r.name} {r.mean_error:+.2e} (t {r.t_stat:+.1f})"

    for e in results:
        if e.spec is None and sig(e.t_stat):
            sign = 0.0 if e.v_mean == 0 else math.copysign(1.0, e.v_mean)
            notes.append(
                f"{e.name}: the fp64 O rounded once to bf16 already errs by {e.mean_error:+.2e} "
                f"on average (t {e.t_stat:+.1f}, {direction(e.mean_error, sign)}): any "
                "kernel storing O in bf16 pays this on these rows, so the verdict reads the "
                "excess = O − bf16(fp64 O), what the kernel adds"
            )
    # each stabilized variant against the standard kernel it modifies, on the same rows (the
    # released kernel's clamp, row_sum_floor, and its wholly masked causal tiles, masked_tiles,
    # are inert without the shift: paper-code lacks them)
    for r in results:
        if r.spec is None or r.spec.softmax != "stabilized":
            continue
        released_off = {"row_sum_floor": None, "masked_tiles": "skip"}
        base = r.spec.replace(softmax="standard", beta=KernelSpec().beta, **released_off)
        o = next(
            (
                o
                for o in results
                if o.spec is not None
                and o.spec.replace(**released_off) == base
                and rows_of(o) == rows_of(r)
            ),
            None,
        )
        if o is None:
            continue
        if biased(o):
            notes.append(
                f"{r.name} vs {o.name}: |mean error| {_compare(r.mean_error, o.mean_error)} "
                f"({r.mean_error:+.2e} vs {o.mean_error:+.2e}); |excess| "
                f"{_compare(r.excess_mean, o.excess_mean)} ({r.excess_mean:+.2e}, "
                f"t {r.excess_t_stat:+.1f} vs {o.excess_mean:+.2e}, t {o.excess_t_stat:+.1f})"
            )
        elif biased(r):
            notes.append(
                f"{r.name} adds a one-sided excess {r.excess_mean:+.2e} (t {r.excess_t_stat:+.1f}) "
                f"that {o.name} does not have ({o.excess_mean:+.2e}, t {o.excess_t_stat:+.1f})"
            )
    for r in results:
        if r.shrunk_rows > 0:
            clamp = ""
            if r.spec is not None and r.spec.row_sum_floor is not None:
                clamp = (
                    f": its tile row sums are clamped at {r.spec.row_sum_floor:g} (row_sum_floor, "
                    "as released), so O shrinks where the stabilized shift pushes a tile's sum "
                    "below that"
                )
            notes.append(
                f"{r.name}: |O| < {SHRUNK_BELOW:g}·|exact O| on {r.shrunk_rows:.1%} of rows{clamp}"
            )
    by_name = {r.name: r for r in results}
    pc, fa = by_name.get("paper-code"), by_name.get("fa2")
    if pc and fa:
        notes.append(
            f"bf16 accumulator, unnormalised P̄V rounded (paper-code): {short(pc)}, excess "
            f"{pc.excess_mean:+.2e} (t {pc.excess_t_stat:+.1f}); fp32 accumulator, acc/ℓ "
            f"rounded once (fa2): {short(fa)}, excess {fa.excess_mean:+.2e} "
            f"(t {fa.excess_t_stat:+.1f})"
        )
    normalised = [
        r
        for r in results
        if r.rowsum_t is not None and sig(r.rowsum_t) and abs(r.rowsum_mean) >= ROWSUM_FLOOR
    ]
    if normalised:
        notes.append(
            f"the backward's recomputed softmax sums to 1 + a one-sided bias (ΣP − 1 from the "
            f"forward's lse; |mean| ≥ {ROWSUM_FLOOR:g}) in: "
            + "; ".join(f"{r.name} {r.rowsum_mean:+.2e} (t {r.rowsum_t:+.1f})" for r in normalised)
        )
    default_rows = (c.ties, c.v_mean, c.v_mean if c.tail_v_mean is None else c.tail_v_mean)
    controls: dict[str, list[VariantResult]] = {}
    for r in results:
        if rows_of(r) == default_rows:
            continue
        if r.ties == 1:
            label = "single max, no tie (P̄ = 1 once)"
        elif r.tail_v_mean != r.v_mean:
            label = f"tail V mean {r.tail_v_mean:g} vs tied V mean {r.v_mean:g} (sink-like)"
        else:
            label = f"ties {r.ties}, V mean {r.v_mean:g}"
        controls.setdefault(label, []).append(r)
    for label, group in controls.items():
        notes.append(f"{label}: " + "; ".join(short(r) for r in group))
    if c.v_mean == 0:
        notes.append("v_mean = 0: V has no preferred sign, so 'away from zero' is undefined")
    notes.append(
        "P̄ = 1 per row counts every tile's running max too (a tile read before the row's max "
        "has its own max at P̄ = 1, later rescaled by α); tie events include tail tiles whose "
        "max is duplicated (e.g. once bf16 score rounding merges nearby scores)"
    )
    return notes


def _compare(value: float, base: float) -> str:
    """'Nx smaller' or 'Nx larger': |value| against |base|."""
    if abs(value) <= abs(base):
        return f"{abs(base) / abs(value):.0f}x smaller" if value else "inf x smaller"
    return f"{abs(value) / abs(base):.0f}x larger" if base else "inf x larger"
