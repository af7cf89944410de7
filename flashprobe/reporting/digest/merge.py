"""Several digests → one, keeping the run each report would count.

A results folder holds one digest per claim, not one per device session: each session's digest
is merged into the claim's file. The runs kept are those `digest-report` counts
(digest.pooling: per suite, variant, grid point and seed a run with an outcome before a cut
one, then the longest, then the latest);
the superseded ones are dropped and listed. Cells are copied as written (no re-encoding), so a
merge loses nothing of a counted run. The newest format version among the inputs is kept;
version 1 (a bare list of cells, without configs or start times) cannot be merged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe import __version__
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.atomic import check_output_folder, write_text_atomic, write_text_new
from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.pooling import Superseded, one_run_per_seed
from flashprobe.reporting.digest.schema import FORMAT
from flashprobe.store.result_store import store_around


@dataclass(frozen=True)
class MergeResult:
    kept: int
    superseded: tuple[Superseded, ...]


def merge_digests(
    inputs: Sequence[str | Path], out: str | Path, *, force: bool = False
) -> MergeResult:
    """Write the merge of `inputs` (older first) to `out`; refuses to replace an existing file
    unless `force` (`out` may be one of the inputs: everything is read before it is written)."""
    out = Path(out)
    if len(inputs) < 2:
        raise FlashprobeError("digest-merge needs at least two digest files")
    if out.is_dir():
        raise FlashprobeError(f"merge output is a folder: {out}")
    check_output_folder(out.parent, "merge output")
    # --force replaces OUT: never a file of a result store (as `flashprobe digest` refuses)
    store = store_around(out)
    if store is not None:
        raise FlashprobeError(f"merge output {out} is inside the result store {store}")
    if out.exists() and not force:
        raise FlashprobeError(f"{out} exists; refusing to overwrite it (--force replaces it)")
    digests = [load_digest(path, order) for order, path in enumerate(inputs)]
    for digest in digests:
        if digest.version < 2:
            raise FlashprobeError(
                f"cannot merge {digest.path}: format version 1 has no configs or start times"
            )
    raws = [json.loads(Path(path).read_text(encoding="utf-8")) for path in inputs]
    cells = [cell for digest in digests for cell in digest.cells]
    if not cells:
        raise FlashprobeError("the digests hold no cells")  # as digest-report says
    kept, superseded = one_run_per_seed(cells)
    from flashprobe.runner.plan import code_version

    merged = {
        "format": FORMAT,
        "version": max(d.version for d in digests),
        "written_by": {"flashprobe": __version__, "code_version": code_version(), "merged": True},
        "store": _one_or_several(raw.get("store") for raw in raws),
        "every": _one_or_several(d.every for d in digests),
        # a suite digested twice: the later definition (a later session's suite.json names
        # every seed trained so far)
        "suites": {name: s for digest in digests for name, s in digest.suites.items()},
        "cells": [raws[cell.order]["cells"][cell.index] for cell in kept],
        # the store checks of every input (they name their cells), once each
        "notes": list(dict.fromkeys(str(n) for raw in raws for n in raw.get("notes") or [])),
        "merged_from": [
            {"file": Path(path).name, "written_by": raw.get("written_by"), "cells": len(d.cells)}
            for path, raw, d in zip(inputs, raws, digests, strict=True)
        ],
    }
    text = json.dumps(merged, allow_nan=False, separators=(",", ":")) + "\n"
    (write_text_atomic if force else write_text_new)(out, text)
    return MergeResult(len(kept), tuple(superseded))


def _one_or_several(values: Any) -> Any:
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else None
