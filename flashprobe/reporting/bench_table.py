"""Tables for `flashprobe bench`: TFLOP/s per implementation and the ratios that matter."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from flashprobe.probes.benchmark import Implementation, Timing, ratio_table


def bench_tables(timings: Sequence[Timing], impls: Sequence[Implementation]) -> str:
    """One table per mode: shapes down, TFLOP/s per implementation, then ratios.

    Ratios: the first preset (the base) against SDPA flash and cuDNN; every other preset and the
    instrumented run against the base.
    """
    names = [i.name for i in impls]
    ours = [i.name for i in impls if i.spec is not None]
    peers = [n for n in ("sdpa-flash", "sdpa-cudnn") if n in names]
    base = ours[0] if ours else None
    ratio_cols = [(base, p) for p in peers if base] + [(o, base) for o in ours[1:]]
    ratios = {p: ratio_table(timings, p) for p in {*peers, *([base] if base else [])}}

    blocks = []
    for mode in dict.fromkeys(t.mode for t in timings):
        rows = []
        for shape in dict.fromkeys(t.shape for t in timings if t.mode == mode):
            by_impl = {t.impl: t for t in timings if t.mode == mode and t.shape == shape}
            row = [shape.label()]
            row += [_num(by_impl[n].tflops if n in by_impl else None, "{:.0f}") for n in names]
            row += [_num(ratios[b].get((shape, o, mode)), "{:.2f}×") for o, b in ratio_cols]
            rows.append(row)
        headers = ["shape", *names, *[f"{o}/{_short(b)}" for o, b in ratio_cols]]
        blocks.append(
            f"{mode} (TFLOP/s)\n" + tabulate(rows, headers=headers, disable_numparse=True)
        )
    return "\n\n".join(blocks)


def _short(name: str) -> str:
    return {"sdpa-flash": "flash", "sdpa-cudnn": "cudnn"}.get(name, name)


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)
