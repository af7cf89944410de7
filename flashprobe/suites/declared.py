"""A variant's resolved cell config from a suite's declaration (the suite.json `flashprobe
ablate` writes), for a variant that has not run: the ranking needs the add design's reference
(replay.safe) to tell the designs apart before its runs exist."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.suites.cell_config import resolve_cell_config
from flashprobe.suites.suite import SUITE_KEYS, expand_suite


def declared_config(declared: Mapping[str, Any], variant: str) -> dict[str, Any] | None:
    """The config `flashprobe ablate` would give `variant`'s first cell (seed 0, the first grid
    point, no branch); None when the declaration does not name it or does not resolve (an
    older format)."""
    variants = declared.get("variants")
    if not isinstance(variants, Mapping) or variant not in variants:
        return None
    # The axes stay: cells[0] is the variant's first grid point, the config the ranking
    # compares for every variant (attribution.ranking.config_of).
    raw = {k: v for k, v in declared.items() if k in SUITE_KEYS and k != "branch"}
    raw.update(variants={variant: variants[variant]}, seeds=[0])
    try:
        return resolve_cell_config(expand_suite(raw).cells[0].config).to_dict()
    except (FlashprobeError, KeyError, TypeError, ValueError):
        return None
