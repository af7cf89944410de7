"""Pool a suite's variants by the value of each kernel switch: which switch splits the runs
that failed from those that did not?

The ranking (attribution.ranking) compares each variant with its reference, so with three
seeds no single variant can reach p < 0.05 against a 3-of-3 baseline. When several variants
share a switch value, their seeds can be pooled: for every KernelSpec field (the running ℓ by
its effective precision, `l_precision`), the variants are split by their value of it, and each
value's failed/counted seeds are tested against the rest's (Fisher's exact test). Switches
that split the variants the same way are one row ("same split as").

This is a screen, not a designed comparison: the variants of one value differ in other
switches too, so a switch can stand in for another one that moves with it. `p adj.` corrects
for the number of splits screened (Bonferroni); a split that survives is a hypothesis to test
with a one-switch variant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flashprobe.attribution.ranking import Outcome, config_of, fisher_exact, spec_of
from flashprobe.spec import FIELD_NAMES, format_field

#: The switches pooled: the spec's fields, with the running ℓ's effective precision in place
#: of `l_accumulator` (null there means "as accumulator").
SWITCHES = tuple("l_precision" if name == "l_accumulator" else name for name in FIELD_NAMES)


def pooled_splits(cells: Sequence[Any], outcomes: Mapping[str, Outcome]) -> list[dict[str, Any]]:
    """One row per (switch, value) that splits the variants with an outcome, most significant
    first. A two-valued split gives one row: the value with the higher failure rate."""
    specs = {
        variant: spec
        for variant, out in outcomes.items()
        if out.seeds and (spec := spec_of(config_of(cells, variant))) is not None
    }
    splits: dict[tuple[frozenset[str], ...], list[str]] = {}  # partition → its switches
    values: dict[str, dict[str, Any]] = {}
    for switch in SWITCHES:
        by_value: dict[Any, set[str]] = {}
        for variant, spec in specs.items():
            by_value.setdefault(getattr(spec, switch), set()).add(variant)
        if len(by_value) < 2:
            continue
        partition = tuple(sorted((frozenset(g) for g in by_value.values()), key=sorted))
        splits.setdefault(partition, []).append(switch)
        values[switch] = {v: frozenset(g) for v, g in by_value.items()}
    total_failed = sum(outcomes[v].failed for v in specs)
    total_seeds = sum(outcomes[v].seeds for v in specs)
    rows = []
    for switches in splits.values():
        switch = switches[0]
        groups = []
        for value, members in values[switch].items():
            failed = sum(outcomes[v].failed for v in members)
            seeds = sum(outcomes[v].seeds for v in members)
            groups.append((value, members, failed, seeds))
        if len(groups) == 2:  # both rows would carry the same test: keep the failing side
            groups = [max(groups, key=lambda g: (g[2] / g[3], -len(g[1])))]
        for value, members, failed, seeds in groups:
            rest_failed, rest_seeds = total_failed - failed, total_seeds - seeds
            rows.append(
                {
                    "switch": switch,
                    "value": format_field(switch, value),
                    "same_split": ", ".join(switches[1:]) or None,
                    "variants": ", ".join(sorted(members)),
                    "failed": failed,
                    "seeds": seeds,
                    "rest_failed": rest_failed,
                    "rest_seeds": rest_seeds,
                    "fisher_p": fisher_exact(failed, seeds, rest_failed, rest_seeds),
                }
            )
    for row in rows:
        row["adjusted_p"] = min(1.0, row["fisher_p"] * len(rows))
    rows.sort(key=lambda r: (r["fisher_p"], r["switch"], r["value"]))
    return rows
