"""Tables for `flashprobe bench`: TFLOP/s per implementation and the ratios that matter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tabulate import tabulate

from flashprobe.probes.benchmark import Implementation, Timing, ratio_table
from flashprobe.probes.flash_attn_peers import NOT_INSTALLED

_SHORT = {
    "sdpa-flash": "flash",
    "sdpa-cudnn": "cudnn",
    "flash-attn-2": "FA2",
    "flash-attn-3": "FA3",
}


def bench_tables(timings: Sequence[Timing], impls: Sequence[Implementation]) -> str:
    """One table per mode: shapes down, TFLOP/s per implementation, then ratios; then one line
    per reason an implementation did not run.

    Ratios: the first preset (the base) against each peer (SDPA flash and cuDNN, FlashAttention-2
    and -3), and so is the base preset with atomic dQ when both are timed (`--dq both`); every
    other preset and the instrumented run against the base (another preset's atomic-dQ run
    against the base's atomic-dQ run). A peer that is not installed gets no columns, only its
    line below the tables.
    """
    names = [i.name for i in impls if not _not_installed(i.name, timings)]
    ours = [i.name for i in impls if i.spec is not None]
    peers = [i.name for i in impls if i.spec is None and i.name in names]
    base = ours[0] if ours else None
    base_spec = next((i.spec for i in impls if i.spec is not None), None)
    # the base preset, and the same preset with atomic dQ (`--dq both`)
    against_peers = [
        i.name for i in impls if i.spec is not None and i.spec == base_spec and not i.instrument
    ]
    # every other preset against the base summing dQ the same way (`--dq both`: sfa/fa2 and
    # sfa+atomic-dq/fa2+atomic-dq), the base's atomic run and the instrumented one against it
    dq_base = {
        i.dq_accumulation: i.name
        for i in reversed(impls)
        if i.spec is not None and i.spec == base_spec and not i.instrument
    }
    by_name = {i.name: i for i in impls}
    ratio_cols = [(o, p) for o in against_peers for p in peers] + [
        (o, base if o in against_peers else dq_base.get(by_name[o].dq_accumulation, base))
        for o in ours[1:]
    ]
    references = {*peers, *(b for _, b in ratio_cols if b is not None)}
    ratios = {p: ratio_table(timings, p) for p in references}

    blocks = []
    for mode in dict.fromkeys(t.mode for t in timings):
        rows = []
        for shape in dict.fromkeys(t.shape for t in timings if t.mode == mode):
            by_impl = {t.impl: t for t in timings if t.mode == mode and t.shape == shape}
            row = [shape.label()]
            row += [_num(by_impl[n].tflops if n in by_impl else None, "{:.0f}") for n in names]
            row += [_num(ratios[b].get((shape, o, mode)), "{:.2f}×") for o, b in ratio_cols]
            rows.append(row)
        headers = ["shape", *names, *[f"{o}/{_SHORT.get(b, b)}" for o, b in ratio_cols]]
        blocks.append(
            f"{mode} (TFLOP/s)\n" + tabulate(rows, headers=headers, disable_numparse=True)
        )
    notes = _notes(timings)
    return "\n\n".join(blocks + (["\n".join(notes)] if notes else []))


def _not_installed(name: str, timings: Sequence[Timing]) -> bool:
    mine = [t for t in timings if t.impl == name]
    return bool(mine) and all(t.note == NOT_INSTALLED for t in mine)


def _notes(timings: Sequence[Timing]) -> list[str]:
    """ "<impl>: <why>" once per implementation and reason, with how many timings it cost."""
    totals = Counter(t.impl for t in timings)
    failed = Counter((t.impl, t.note) for t in timings if t.ms is None)
    return [
        f"{impl}: {note}" + ("" if n == totals[impl] else f" ({n} of {totals[impl]} timings)")
        for (impl, note), n in failed.items()
    ]


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)
