"""Pointer loads against tensor-descriptor (TMA) loads, per tuned kernel key, from the timings
`scripts/gpu_kernels.py --tune` writes on a Hopper GPU (OUT/tune_log.json: every candidate
config timed both ways in one run, so each ratio compares two kernels measured side by side).

    python scripts/tma_gain.py OUT/tune_log.json

Per key: the fastest pointer config and its ms, the fastest TMA config and its ms, and pointer
÷ TMA (> 1: TMA is faster). A file it cannot read is one line on stderr and exit code 2.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from flashprobe.errors import FlashprobeError, OneLineParser
from flashprobe.json_io import read_json_file

EXPECTED = "scripts/gpu_kernels.py --tune's tune_log.json: {key: [[config, ms], ...]}"


def read_log(path: Path) -> tuple[dict[str, Any], dict[str, list]]:
    """(environment, timings by key); a FlashprobeError naming the file and the problem."""
    data = read_json_file(path, "tune log")
    if isinstance(data, dict) and "timings" in data:  # with its environment
        environment, data = data.get("environment") or {}, data["timings"]
    else:  # written before the log recorded its environment
        environment = {}
    if not isinstance(data, dict) or not data:
        raise FlashprobeError(f"{path} holds no timings (expected {EXPECTED})")
    for key, rows in data.items():
        ok = isinstance(rows, list) and all(
            isinstance(r, list) and len(r) == 2 and isinstance(r[0], dict)
            and isinstance(r[1], int | float) and not isinstance(r[1], bool)
            for r in rows
        )  # fmt: skip
        if not ok:
            raise FlashprobeError(f"{path}: {key} is not a list of [config, ms] (expected "
                                  f"{EXPECTED})")  # fmt: skip
    return environment, data


def gains(timings: dict[str, list]) -> list[dict[str, Any]]:
    """Per key: the fastest finite pointer and TMA configs and pointer ÷ TMA (None where one
    side has no finite time: not timed, or every config of it failed)."""
    rows = []
    for key, entries in sorted(timings.items()):
        best: dict[bool, tuple[float, dict]] = {}
        for config, ms in entries:
            tma = bool(config.get("tma", False))
            if math.isfinite(ms) and ms > 0 and (tma not in best or ms < best[tma][0]):
                best[tma] = (ms, config)
        pointer, tma = best.get(False), best.get(True)
        rows.append({
            "key": key,
            "pointer ms": pointer[0] if pointer else None,
            "TMA ms": tma[0] if tma else None,
            "pointer ÷ TMA": pointer[0] / tma[0] if pointer and tma else None,
            "TMA config": _short(tma[1]) if tma else None,
        })  # fmt: skip
    return rows


def _short(config: dict) -> str:
    names = ("block_m", "block_n1", "block_m2", "num_warps", "num_stages", "max_registers")
    return " ".join(f"{n}={config[n]}" for n in names if config.get(n) is not None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=Path(__file__).name, description=__doc__.split("\n")[0])
    parser.add_argument("tune_log", type=Path, help="OUT/tune_log.json of gpu_kernels.py --tune")
    args = parser.parse_args(argv)
    try:
        environment, timings = read_log(args.tune_log)
    except FlashprobeError as exc:
        parser.error(str(exc))
    rows = gains(timings)
    if environment:
        print(f"{environment.get('gpu')}, torch {environment.get('torch')}, "
              f"triton {environment.get('triton')}\n")  # fmt: skip
    print(tabulate(rows, headers="keys", tablefmt="github", floatfmt=".3f", missingval="–"))
    both = [r["pointer ÷ TMA"] for r in rows if r["pointer ÷ TMA"] is not None]
    if both:
        print(f"\npointer ÷ TMA over {len(both)} keys: {min(both):.2f}–{max(both):.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
