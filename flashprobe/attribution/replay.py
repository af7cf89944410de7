"""Replay every kernel variant of a suite on captured training tensors and measure mechanisms.

For each source cell (default: the failing baseline's cells) and each of its captures
(run/captures/step_<t>.safetensors: Q, K, V, dO per layer, see store.result_store), every
variant's kernel (its KernelSpec per layer and head group, from its model config: a trained
cell's, another suite file's or the stored suite definition's, see attribution.replay_variants)
runs the forward and backward on the same Q, K, V and dO, and the fp64 golden runs once
(attribution.replay_metrics: what is measured per variant, step, layer and head, and across
steps).

Results: STORE/<suite>/<source cell>/replay.json (per cell, keyed by the captures, the variants'
specs and the backend, so an unchanged replay is skipped) and STORE/<suite>/replay.json (roles,
variants and the per-variant summary the report ranks with). Both are written atomically. A
replay of some variants adds them to the earlier replay of the same captures; the key and that
merge: attribution.replay_files.

Which variants, on whose captures and on which backend: the suite's `replay:` section and the
flags of `flashprobe replay` (attribution.replay_settings); variants of another suite file
without training them: `variants_from` (attribution.replay_variants).

On the CPU a replay runs on one thread (reference.threads): the emulator's fp32 sums, the golden
and the metrics' reductions split their sums by thread, so the same store replayed in processes
with different thread counts would otherwise differ in the last bits (and a flipped bf16
rounding of the emulator's output moves dK errors by ~1e-4 relative).
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from flashprobe import __version__
from flashprobe.attribution import mechanism as mech
from flashprobe.attribution.ranking import Roles, resolve_roles
from flashprobe.attribution.replay_files import (
    FORMAT,
    cached,
    capture_fingerprints,
    earlier_kept,
    replay_key,
    step_numbers,
    weight_source,
    with_earlier,
)
from flashprobe.attribution.replay_kernel import KernelFn, run_kernel
from flashprobe.attribution.replay_metrics import HeadSeries, head_metrics
from flashprobe.attribution.replay_settings import ReplaySettings, stored_settings
from flashprobe.attribution.replay_summary import summarise
from flashprobe.attribution.replay_variants import (
    LayerGroups,
    VariantConfigs,
    choose,
    resolve_groups,
    suite_file_variants,
    trained_variants,
)
from flashprobe.attribution.selection import one_run_per_seed
from flashprobe.backends import machine_backend
from flashprobe.errors import FlashprobeError, RunStopped
from flashprobe.reference.golden import golden_backward, golden_forward
from flashprobe.reference.heads import expand_kv, group_size
from flashprobe.reference.threads import measurement_threads
from flashprobe.store import reader as sr
from flashprobe.store.capture_reader import (
    Capture,
    capture_files,
    load_capture,
    read_capture_header,
)
from flashprobe.store.metrics_check import unread_notes
from flashprobe.store.replay_results import (
    read_replay,
    read_suite_replay,
    write_replay,
    write_suite_replay,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ReplayOutcome:
    suite: str
    roles: Roles
    cells: list[dict[str, Any]]  # {cell, status, steps, message?}
    suite_file: str | None
    notes: list[str]


def replay_store(
    store: Any,
    suite: Any,
    *,
    settings: ReplaySettings | None = None,
    force: bool = False,
    progress: Progress | None = None,
    variants_from: str | Path | None = None,
) -> ReplayOutcome:
    """Replay one suite of a result store. `store`: a ResultStore or its root path; `suite`: an
    suites.suite.Suite (its `replay:` section supplies the settings) or a suite name;
    `variants_from`: another suite file whose variants replay too (replay_variants)."""
    from flashprobe.store.result_store import ResultStore
    from flashprobe.suites.suite import Suite

    root = store.root if isinstance(store, ResultStore) else store
    name = suite.name if isinstance(suite, Suite) else suite
    if settings is None:
        raw = suite.raw if isinstance(suite, Suite) else {}
        settings = ReplaySettings.from_suite(raw.get("replay"))
    cells = sr.read_cells(root, str(name))
    other = suite_file_variants(variants_from) if variants_from is not None else None
    return replay_cells(cells, settings, force=force, progress=progress, other_variants=other)


def replay_suites(
    store: str | Path,
    suite: str | None = None,
    *,
    force: bool = False,
    progress: Progress | None = None,
    variants_from: str | Path | None = None,
    **flags: Any,
) -> Iterator[tuple[str, ReplayOutcome]]:
    """Replay every suite of a store (or only `suite`), one after the other: each with `flags`
    (ReplaySettings fields; None: not given) over the suite's stored settings
    (replay_settings.stored_settings). Yields (suite name, outcome) as each is done.
    `variants_from`: a suite file (path or bundled name) whose variants replay too, untrained
    (attribution.replay_variants); the store must then hold one suite, or `suite` names one.

    A suite whose captures do not fit its cells' configs (a hand edit, another code version)
    stops the replay with RunStopped; the training results stand. An untrained variant that
    does not fit them is bad input (FlashprobeError)."""
    cells = sr.read_cells(store, suite)
    suites = sr.suites_of(cells)
    other = None
    if variants_from is not None:
        if len(suites) > 1:
            raise FlashprobeError(
                f"--variants-from {variants_from}: name the suite whose captures to replay them "
                f"on with --suite (suites here: {', '.join(suites)})"
            )
        other = suite_file_variants(variants_from)
    settings_of = {n: stored_settings(sr.suite_dir(m[0]), **flags) for n, m in suites.items()}
    # Every suite's flags first: a --baseline the second suite lacks must not leave the first
    # replayed and its replay.json rewritten before the error.
    for name, members in suites.items():
        try:
            check_cells(members, settings_of[name], other)
        except FlashprobeError as exc:
            raise FlashprobeError(f"suite {name}: {exc}") from None
    for name, members in suites.items():
        settings = settings_of[name]
        try:
            outcome = replay_cells(
                members, settings, force=force, progress=progress, other_variants=other
            )
        except FlashprobeError as exc:
            raise FlashprobeError(f"suite {name}: {exc}") from None
        except (RuntimeError, ValueError, KeyError, IndexError, TypeError) as exc:
            last = traceback.format_exception_only(exc)[-1].strip().splitlines()[0]
            raise RunStopped(f"replay of suite {name} failed: {last}") from None
        yield name, outcome


def check_cells(
    cells: list[sr.CellView],
    settings: ReplaySettings,
    other_variants: Mapping[str, VariantConfigs] | None = None,
) -> None:
    """The checks of replay_cells that read no capture (roles, backend, variants): bad input
    raises FlashprobeError before anything is replayed or written."""
    counted, _ = one_run_per_seed(cells)
    resolve_roles(counted, settings.baseline, settings.safe, settings.components)
    machine_backend(settings.backend)
    choose(
        counted[0].suite, trained_variants(counted), other_variants or {},
        sr.suite_dir(counted[0]), settings.variants,
    )  # fmt: skip


def replay_cells(
    cells: list[sr.CellView],
    settings: ReplaySettings,
    *,
    force: bool = False,
    progress: Progress | None = None,
    kernel: KernelFn | None = None,
    other_variants: Mapping[str, VariantConfigs] | None = None,
) -> ReplayOutcome:
    """Replay the cells of one suite (see the module doc); `kernel` replaces run_kernel (tests
    plant known errors through it); `other_variants` (replay_variants.suite_file_variants):
    untrained variants replayed as well."""
    say = progress or (lambda _msg: None)
    suite = cells[0].suite
    readable = {c.name for c in cells}
    cells, superseded = one_run_per_seed(cells)  # as report counts them
    roles = resolve_roles(cells, settings.baseline, settings.safe, settings.components)
    notes = [*roles.notes, *unread_notes(cells)]
    if superseded:
        notes.append(f"{len(superseded)} superseded run(s) not replayed (see `flashprobe report`)")
    backend = machine_backend(settings.backend)
    folder = sr.suite_dir(cells[0])
    trained = trained_variants(cells)
    chosen = choose(suite, trained, other_variants or {}, folder, settings.variants)
    sources = [c for c in cells if settings.sources == "all" or c.variant == roles.baseline]
    # Every source's capture files and kernels first: a missing capture or a variant that does
    # not fit one source's captures stops the replay before any replay.json is written.
    captures = [(source, capture_files(source)) for source in sources]
    plans = _plans(chosen, captures)
    earlier = read_suite_replay(folder)
    kept = earlier_kept(
        folder, earlier, readable, list(chosen), backend, roles.baseline, plans, force
    )
    if kept.redo:
        # the earlier replay's other variants again, as trained in the suite (all its cells)
        everyone, _ = one_run_per_seed(sr.read_cells(folder.parent, folder.name))
        more = {v: d for v, d in trained_variants(everyone).items() if v in kept.redo}
        try:
            chosen = choose(
                suite, {**more, **trained}, other_variants or {}, folder,
                [*chosen, *(v for v in kept.redo if v not in chosen)],
            )  # fmt: skip
        except FlashprobeError:
            raise FlashprobeError(kept.refusal) from None
        plans = _plans(chosen, captures)
    wanted = list(chosen)
    untrained = {v: d[0].origin for v, d in chosen.items() if not d[0].trained}
    if untrained:
        notes.append(
            f"{len(untrained)} variant(s) replayed without training (no training outcome): "
            + ", ".join(f"{v} ({origin})" for v, origin in untrained.items())
        )
    notes += kept.notes
    results: list[dict[str, Any]] = []
    docs: list[dict[str, Any]] = []
    for source, steps, groups in plans:
        if not steps:
            state = "unfinished, " if not source.finished else ""
            results.append({"cell": source.name, "status": "no captures", "steps": []})
            notes.append(f"{source.name}: {state}no captures to replay")
            continue
        files = capture_fingerprints(steps)
        key = replay_key(steps, groups, backend, files)
        old = read_replay(source)
        if not force and cached(old, steps, groups, backend, key):
            results.append({"cell": source.name, "status": "cached", "steps": step_numbers(steps)})
            docs.append(old)
            continue
        say(f"replaying {len(wanted)} variants on {source.name} ({len(steps)} captures)")
        doc = replay_source(source, steps, groups, backend, progress=say, kernel=kernel)
        doc["key"] = key
        doc["captures"] = files
        doc = with_earlier(doc, old, kept.variants)
        write_replay(source, doc)
        docs.append(doc)
        results.append({"cell": source.name, "status": "replayed", "steps": step_numbers(steps)})
    if not docs:
        notes.append(
            f"nothing replayed: the {settings.sources} cells of suite {suite!r} hold no captures "
            "(set capture: {layers: [...], steps: [...]} in the suite)"
        )
        if earlier is not None:
            # captures deleted after a replay: an empty summary would wipe what report ranks with
            path = folder / sr.REPLAY_FILE
            notes.append(f"kept the earlier {path} (its captures are gone)")
            return ReplayOutcome(suite, roles, results, str(path), notes)
    suite_doc = {
        "format": FORMAT,
        "suite": suite,
        "roles": roles.to_dict(),
        "backend": backend,
        "variants": [*wanted, *kept.variants],
        "untrained_variants": {**kept.untrained, **untrained},
        "sources": [r["cell"] for r in results],
        "summary": summarise(docs),
        "weight_gradient": weight_source(docs),
        "notes": notes,
        "flashprobe": __version__,
    }
    suite_file = write_suite_replay(folder, suite_doc)
    return ReplayOutcome(suite, roles, results, str(suite_file), notes)


def _plans(
    chosen: Mapping[str, tuple[VariantConfigs, ...]],
    captures: list[tuple[sr.CellView, list[tuple[int, Path]]]],
) -> list[tuple[sr.CellView, list[tuple[int, Path]], dict[str, dict[int, LayerGroups]]]]:
    """Per source: its capture files and each chosen variant's kernels on them (an untrained
    variant checked against the captures' headers)."""
    untrained = any(not d[0].trained for d in chosen.values())
    plans = []
    for source, steps in captures:
        headers = [read_capture_header(s, p) for s, p in steps] if untrained else []
        plans.append((source, steps, resolve_groups(chosen, source, headers) if steps else {}))
    return plans


@measurement_threads()
def replay_source(
    source: sr.CellView,
    steps: list[tuple[int, Any]],
    groups: Mapping[str, Mapping[int, LayerGroups]],
    backend: str,
    *,
    progress: Progress | None = None,
    kernel: KernelFn | None = None,
) -> dict[str, Any]:
    """Replay every variant on every capture of one cell; returns the replay.json document."""
    device = torch.device("cuda" if backend == "triton" else "cpu")
    records: list[dict[str, Any]] = []
    series: dict[tuple[str, int, int], HeadSeries] = {}
    notes: set[str] = set()
    has_x = True
    layers_seen: set[int] = set()
    for step, path in steps:
        capture = load_capture(step, path)
        for layer in capture.layers:
            tensors = {n: capture.layer(layer, n) for n in ("q", "k", "v", "do", "o", "x")}
            if any(tensors[n] is None for n in ("q", "k", "v", "do")):
                notes.add(f"step {step} layer {layer}: capture lacks q/k/v/do")
                continue
            layers_seen.add(layer)
            has_x = has_x and tensors["x"] is not None
            if progress:
                progress(f"  step {step} layer {layer}")
            records += _replay_layer(
                source, capture, layer, tensors, groups, backend, device, series, notes,
                kernel or run_kernel,
            )  # fmt: skip
    if not has_x:
        notes.add(
            "captures hold no layer input X (key layer{i}.x): wq_rel/wk_rel and their coherence "
            "use the token-summed dQ/dK instead of dW = dQᵀX"
        )
    return {
        "format": FORMAT,
        "source_cell": source.name,
        "source_variant": source.variant,
        "seed": source.seed,
        "point": [list(p) for p in source.point],
        "backend": backend,
        "steps": step_numbers(steps),
        "layers": sorted(layers_seen),
        "weight_gradient": "dW = dQᵀX" if has_x else "token-summed dQ (no X captured)",
        "records": records,
        "series": [s.to_dict(v, layer, head) for (v, layer, head), s in sorted(series.items())],
        "notes": sorted(notes),
        "flashprobe": __version__,
    }


def _replay_layer(
    source: sr.CellView,
    capture: Capture,
    layer: int,
    tensors: Mapping[str, torch.Tensor | None],
    groups: Mapping[str, Mapping[int, LayerGroups]],
    backend: str,
    device: torch.device,
    series: dict[tuple[str, int, int], HeadSeries],
    notes: set[str],
    kernel: KernelFn,
) -> list[dict[str, Any]]:
    q, k, v, do = (tensors[n].to(device) for n in ("q", "k", "v", "do"))  # type: ignore[union-attr]
    # Grouped-query captures: each query head replays on its own copy of its key/value head, so
    # dK, dW_K and the key-shift leak are that query head's share of the shared head's gradient.
    group = group_size(q, k)
    k, v = expand_kv(k, group), expand_kv(v, group)
    x = tensors["x"]
    x64 = x.to(device).double() if x is not None else None
    captured_o = tensors["o"]
    causal, scale = capture.causal, capture.softmax_scale
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    gold_f = golden_forward(q, k, v, causal=causal, scale=scale)
    gold_b = golden_backward(q, k, v, do, causal=causal, scale=scale)
    out = []
    for variant, by_layer in groups.items():
        for heads, spec in by_layer.get(layer, []):
            if spec is None:
                notes.add(f"{variant}: layer {layer} heads {list(heads)} use no flashprobe kernel")
                continue
            idx = torch.tensor(heads, device=device)
            run = kernel(
                *(t.index_select(1, idx) for t in (q, k, v, do)),
                spec,
                causal=causal,
                scale=scale,
                backend=backend,
            )
            for j, head in enumerate(heads):
                rec, delta_rows, wq_err, wk_err = head_metrics(run, j, head, gold_f, gold_b, x64)
                rec["key_shift_leak"], rec["key_shift_drift"] = mech.key_shift_leak(
                    run.dk[:, j], q[:, head]
                )
                if run.lse is not None:
                    rec.update(mech.softmax_sum_record(
                        q[:, head], k[:, head], run.lse[:, j], spec, causal=causal, scale=scale
                    ))  # fmt: skip
                if variant == source.variant and captured_o is not None:
                    same = torch.equal(run.o[:, j].cpu(), captured_o[:, head].to(run.o.dtype))
                    rec["matches_capture"] = same
                rec.update(variant=variant, step=capture.step, layer=layer, head=head)
                out.append(rec)
                s = series.setdefault((variant, layer, head), HeadSeries())
                s.steps.append(capture.step)
                s.delta_sums.append(rec["delta_sum"])
                s.delta_rows.append(delta_rows)
                s.wq.add(wq_err)
                s.wk.add(wk_err)
    return out
