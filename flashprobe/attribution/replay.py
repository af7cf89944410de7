"""Replay every kernel variant of a suite on captured training tensors and measure mechanisms.

For each source cell (default: the failing baseline's cells) and each of its captures
(run/captures/step_<t>.safetensors: Q, K, V, dO per layer, see store.result_store), every
variant's kernel (its KernelSpec per layer and head group, from its own cell config) runs the
forward and backward on the same Q, K, V and dO, and the fp64 golden runs once. Per variant,
step, layer and head (error = variant − fp64 golden):

    o_mean, o_t          signed error of O (t over per-row means, attribution.mechanism)
    delta_mean, delta_t  signed error of δ = rowsum(dO∘O) as the variant's backward uses it
    delta_sum            Σ over the captured tokens of the δ error (its running sum over steps
                         is the paper's Fig. 5a)
    dq/dk/dv_rel         relative errors of the attention gradients (grouped-query captures:
                         each query head runs on its own copy of its key/value head, so dK and
                         dV are that head's share of the shared head's gradient)
    wq_rel, wk_rel       relative error of the weight-gradient contribution dW = dQᵀX (dKᵀX)
                         when the capture holds the layer input X (key layer{i}.x, B × T × C);
                         without X, the token-summed dQ (dK) error (what dQᵀX is if every row
                         of X is the same x̄, the paper's similarity claim, up to the x̄ factor)
                         over the summed row norms of the golden dQ (dK) (Σ_T dK is exactly 0)
    tie_events, p_bar_ones   the variant's tied-maximum tiles and P̄ = 1 entries
    key_shift_leak/drift ‖Σ_j dK_j‖ / ‖dK‖ (exactly 0 for exact gradients: softmax ignores a
                         common shift of a row's scores) and whether that leak pushes the scores
                         up (> 0) or down (attribution.mechanism.key_shift_leak)
    softmax_sum_bias/_t  mean (and t over rows) of ΣP − 1 for the softmax the variant's backward
                         recomputes from its forward's lse (> 0: a bf16 running ℓ drops tails)

and across steps per variant, layer and head: the δ error's running sum and coherence
|Σ_t s_t| / Σ_t |s_t|, the weight-gradient error's coherence ‖Σ_t E_t‖ / Σ_t ‖E_t‖, its top
singular directions' step-to-step similarity and rank-1 energy share, and the growth exponent of
the summed δ error over prefixes of the sequence (≈ 1 bias, ≈ 0.5 noise).

Results: STORE/<suite>/<source cell>/replay.json (per cell, keyed by the captures, the variants'
specs and the backend, so an unchanged replay is skipped) and STORE/<suite>/replay.json (roles,
variants and the per-variant summary the report ranks with). Both are written atomically.

Suite YAML (optional section; every key optional):

    replay:
      baseline: fa2            # the failing baseline (default: branch.from, then a variant
                               # named baseline, then the fa2 spec)
      safe: all-safe           # the all-safe variant of a one-factor-in design (default: a
                               # variant named safe / all-safe / fp32, or the fp32 spec)
      components: {sfa: stabilized softmax}   # labels instead of the spec diff
      variants: [fa2, sfa]     # which variants to replay (default: all)
      sources: baseline        # whose captures to replay on: baseline (default) or all
      backend: auto            # auto | emulator | triton
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from flashprobe import __version__
from flashprobe.attribution import mechanism as mech
from flashprobe.attribution.ranking import Roles, resolve_roles
from flashprobe.attribution.replay_summary import summarise
from flashprobe.attribution.selection import one_run_per_seed
from flashprobe.errors import FlashprobeError
from flashprobe.reference.golden import golden_backward, golden_forward
from flashprobe.reference.heads import expand_kv, group_size
from flashprobe.spec import KernelSpec
from flashprobe.store import reader as sr

FORMAT = "flashprobe-replay/1"
REPLAY_KEYS = ("baseline", "safe", "components", "variants", "sources", "backend")
BACKENDS = ("auto", "emulator", "triton")
SOURCES = ("baseline", "all")
MIN_PREFIX = 8  # shortest prefix of the growth fit

Progress = Callable[[str], None]
#: run_kernel's signature: (q, k, v, do, spec, *, causal, scale, backend) → KernelRun
KernelFn = Callable[..., "KernelRun"]
#: (variant, layer) → [(heads, spec or None when the heads do not use a flashprobe kernel)]
LayerGroups = list[tuple[tuple[int, ...], KernelSpec | None]]


@dataclass(frozen=True)
class ReplaySettings:
    baseline: str | None = None
    safe: str | None = None
    components: Mapping[str, str] = field(default_factory=dict)
    variants: tuple[str, ...] | None = None
    sources: str = "baseline"
    backend: str = "auto"

    @classmethod
    def from_suite(cls, raw: Any, **overrides: Any) -> ReplaySettings:
        """The suite's `replay:` section (None/True: defaults), then non-None overrides."""
        data = {} if raw in (None, True) else raw
        if not isinstance(data, Mapping):
            raise FlashprobeError("replay: must be a mapping (or true)")
        unknown = sorted(set(data) - set(REPLAY_KEYS))
        if unknown:
            raise FlashprobeError(
                f"unknown replay key {unknown[0]!r}; known: {', '.join(REPLAY_KEYS)}"
            )
        merged = {**data, **{k: v for k, v in overrides.items() if v not in (None, (), [])}}
        components = merged.get("components") or {}
        if not isinstance(components, Mapping):
            raise FlashprobeError("replay.components must map variant → label")
        variants = merged.get("variants")
        if variants is not None and (
            isinstance(variants, str) or not isinstance(variants, Sequence)
        ):
            raise FlashprobeError("replay.variants must be a list of variant names")
        settings = cls(
            baseline=_opt_str(merged.get("baseline")),
            safe=_opt_str(merged.get("safe")),
            components={str(k): str(v) for k, v in components.items()},
            variants=tuple(str(v) for v in variants) if variants is not None else None,
            sources=str(merged.get("sources", "baseline")),
            backend=str(merged.get("backend", "auto")),
        )
        if settings.sources not in SOURCES:
            raise FlashprobeError(f"replay.sources must be one of {', '.join(SOURCES)}")
        if settings.backend not in BACKENDS:
            raise FlashprobeError(f"replay backend must be one of {', '.join(BACKENDS)}")
        return settings


@dataclass(frozen=True)
class ReplayOutcome:
    suite: str
    roles: Roles
    cells: list[dict[str, Any]]  # {cell, status, steps, message?}
    suite_file: str | None
    notes: list[str]


# -- entry points ---------------------------------------------------------------------------
def replay_store(
    store: Any,
    suite: Any,
    *,
    settings: ReplaySettings | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> ReplayOutcome:
    """Replay one suite of a result store. `store`: a ResultStore or its root path; `suite`: an
    suites.suite.Suite (its `replay:` section supplies the settings) or a suite name."""
    from flashprobe.store.result_store import ResultStore
    from flashprobe.suites.suite import Suite

    root = store.root if isinstance(store, ResultStore) else store
    name = suite.name if isinstance(suite, Suite) else suite
    if settings is None:
        raw = suite.raw if isinstance(suite, Suite) else {}
        settings = ReplaySettings.from_suite(raw.get("replay"))
    cells = sr.read_cells(root, str(name))
    return replay_cells(cells, settings, force=force, progress=progress)


def replay_cells(
    cells: list[sr.CellView],
    settings: ReplaySettings,
    *,
    force: bool = False,
    progress: Progress | None = None,
    kernel: KernelFn | None = None,
) -> ReplayOutcome:
    """Replay the cells of one suite (see the module doc); `kernel` replaces run_kernel (tests
    plant known errors through it)."""
    say = progress or (lambda _msg: None)
    suite = cells[0].suite
    cells, superseded = one_run_per_seed(cells)  # as report counts them
    roles = resolve_roles(cells, settings.baseline, settings.safe, settings.components)
    notes = list(roles.notes)
    if superseded:
        notes.append(f"{len(superseded)} superseded run(s) not replayed (see `flashprobe report`)")
    backend = choose_backend(settings.backend)
    known = sorted({c.variant for c in cells})
    wanted = list(settings.variants) if settings.variants is not None else known
    missing = [v for v in wanted if v not in known]
    if missing:
        raise FlashprobeError(f"replay: no variant {missing[0]!r} in suite {suite!r}")
    sources = [c for c in cells if settings.sources == "all" or c.variant == roles.baseline]
    results: list[dict[str, Any]] = []
    docs: list[dict[str, Any]] = []
    for source in sources:
        steps = sr.capture_files(source)
        if not steps:
            state = "unfinished, " if not source.finished else ""
            results.append({"cell": source.name, "status": "no captures", "steps": []})
            notes.append(f"{source.name}: {state}no captures to replay")
            continue
        groups = {v: _variant_groups(cells, v, source.point) for v in wanted}
        key = _replay_key(steps, groups, backend)
        old = sr.read_replay(source)
        if old is not None and old.get("key") == key and not force:
            results.append({"cell": source.name, "status": "cached", "steps": _steps(steps)})
            docs.append(old)
            continue
        say(f"replaying {len(wanted)} variants on {source.name} ({len(steps)} captures)")
        doc = replay_source(source, steps, groups, backend, progress=say, kernel=kernel)
        doc["key"] = key
        sr.write_replay(source, doc)
        docs.append(doc)
        results.append({"cell": source.name, "status": "replayed", "steps": _steps(steps)})
    if not docs:
        notes.append(
            f"nothing replayed: the {settings.sources} cells of suite {suite!r} hold no captures "
            "(set capture: {layers: [...], steps: [...]} in the suite)"
        )
    suite_doc = {
        "format": FORMAT,
        "suite": suite,
        "roles": roles.to_dict(),
        "backend": backend,
        "variants": wanted,
        "sources": [r["cell"] for r in results],
        "summary": summarise(docs),
        "weight_gradient": _weight_source(docs),
        "notes": notes,
        "flashprobe": __version__,
    }
    suite_file = sr.write_suite_replay(cells[0].path.parent, suite_doc)
    return ReplayOutcome(suite, roles, results, str(suite_file), notes)


def choose_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise FlashprobeError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "emulator":
        return backend
    cuda = torch.cuda.is_available()
    if backend == "triton" and not cuda:
        raise FlashprobeError("backend triton needs a CUDA GPU; use --backend emulator")
    return "triton" if cuda else "emulator"


# -- one source cell ------------------------------------------------------------------------
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
    series: dict[tuple[str, int, int], _HeadSeries] = {}
    notes: set[str] = set()
    has_x = True
    layers_seen: set[int] = set()
    for step, path in steps:
        capture = sr.load_capture(step, path)
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
        "steps": _steps(steps),
        "layers": sorted(layers_seen),
        "weight_gradient": "dW = dQᵀX" if has_x else "token-summed dQ (no X captured)",
        "records": records,
        "series": [s.to_dict(v, layer, head) for (v, layer, head), s in sorted(series.items())],
        "notes": sorted(notes),
        "flashprobe": __version__,
    }


@dataclass
class _HeadSeries:
    steps: list[int] = field(default_factory=list)
    delta_sums: list[float] = field(default_factory=list)
    delta_rows: list[torch.Tensor] = field(default_factory=list)  # [B, T] per step
    wq: mech.ErrorSeries = field(default_factory=mech.ErrorSeries)
    wk: mech.ErrorSeries = field(default_factory=mech.ErrorSeries)

    def to_dict(self, variant: str, layer: int, head: int) -> dict[str, Any]:
        abs_sum = sum(abs(s) for s in self.delta_sums)
        rows = torch.cat(self.delta_rows) if self.delta_rows else torch.zeros(0, 0)
        grid = mech.prefix_grid(rows.shape[-1], MIN_PREFIX) if rows.numel() else []
        rms = mech.prefix_rms(rows, grid) if grid else []
        return {
            "variant": variant,
            "layer": layer,
            "head": head,
            "steps": self.steps,
            "delta_cumsum": mech.cumulative(self.delta_sums),
            "delta_coherence": abs(sum(self.delta_sums)) / abs_sum
            if abs_sum > 0 and len(self.steps) > 1
            else None,
            "wq_coherence": self.wq.coherence(),
            "wk_coherence": self.wk.coherence(),
            "wq_direction_similarity": self.wq.direction_similarity(),
            "wk_direction_similarity": self.wk.direction_similarity(),
            "wq_rank1_share": self.wq.rank1_share(),
            "wk_rank1_share": self.wk.rank1_share(),
            "growth_n": grid,
            "growth_rms": rms,
            "growth_exponent": mech.growth_exponent(grid, rms) if grid else None,
        }


def _replay_layer(
    source: sr.CellView,
    capture: sr.Capture,
    layer: int,
    tensors: Mapping[str, torch.Tensor | None],
    groups: Mapping[str, Mapping[int, LayerGroups]],
    backend: str,
    device: torch.device,
    series: dict[tuple[str, int, int], _HeadSeries],
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
                rec, delta_rows, wq_err, wk_err = _head_metrics(run, j, head, gold_f, gold_b, x64)
                rec["key_shift_leak"], rec["key_shift_drift"] = mech.key_shift_leak(
                    run.dk[:, j], q[:, head]
                )
                if run.lse is not None:
                    rec["softmax_sum_bias"], rec["softmax_sum_t"] = mech.softmax_sum_bias(
                        q[:, head], k[:, head], run.lse[:, j], spec, causal=causal, scale=scale
                    )
                if variant == source.variant and captured_o is not None:
                    same = torch.equal(run.o[:, j].cpu(), captured_o[:, head].to(run.o.dtype))
                    rec["matches_capture"] = same
                rec.update(variant=variant, step=capture.step, layer=layer, head=head)
                out.append(rec)
                s = series.setdefault((variant, layer, head), _HeadSeries())
                s.steps.append(capture.step)
                s.delta_sums.append(rec["delta_sum"])
                s.delta_rows.append(delta_rows)
                s.wq.add(wq_err)
                s.wk.add(wk_err)
    return out


@dataclass(frozen=True)
class KernelRun:
    """One variant's forward and backward on [B, h, T, D] inputs."""

    o: torch.Tensor
    delta: torch.Tensor
    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    tie_events: torch.Tensor | None
    p_bar_ones: torch.Tensor | None
    lse: torch.Tensor | None = None  # the forward's, [B, h, T] fp32


def run_kernel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    spec: KernelSpec,
    *,
    causal: bool,
    scale: float,
    backend: str,
) -> KernelRun:
    if backend == "triton":
        return _run_triton(q, k, v, do, spec, causal=causal, scale=scale)
    from flashprobe.reference.emulator import emulate_forward
    from flashprobe.reference.emulator_backward import emulate_backward

    fwd = emulate_forward(q, k, v, spec, causal=causal, scale=scale)
    bwd = emulate_backward(
        q, k, v, fwd.o, do.to(q.dtype), fwd.lse, spec, causal=causal, scale=scale,
        o_fp32=fwd.o_fp32,
    )  # fmt: skip
    return KernelRun(
        fwd.o, bwd.delta, bwd.dq, bwd.dk, bwd.dv, fwd.stats.tie_events, fwd.stats.p_bar_ones,
        fwd.lse,
    )  # fmt: skip


def _run_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    spec: KernelSpec,
    *,
    causal: bool,
    scale: float,
) -> KernelRun:
    # The kernel engineer's launch functions, so δ is the kernel's own (not recomputed here).
    from flashprobe.kernels.launch import attention_backward, attention_delta, attention_forward

    q, k, v, do = (t.contiguous() for t in (q, k, v, do.to(q.dtype)))
    keep = spec.delta_source == "o_fp32"
    fwd = attention_forward(
        q, k, v, causal=causal, spec=spec, scale=scale, instrument=True, keep_o_fp32=keep
    )
    kw = {"causal": causal, "spec": spec, "scale": scale, "o_fp32": fwd.o_fp32}
    delta = attention_delta(q, k, v, fwd.o, fwd.lse, do, **kw)
    dq, dk, dv = attention_backward(q, k, v, fwd.o, fwd.lse, do, **kw)
    stats = fwd.stats
    return KernelRun(
        fwd.o, delta, dq, dk, dv,
        stats.tie_events if stats else None, stats.p_bar_ones if stats else None, fwd.lse,
    )  # fmt: skip


def _head_metrics(
    run: KernelRun,
    j: int,
    head: int,
    gold_f: Any,
    gold_b: Any,
    x64: torch.Tensor | None,
) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor, torch.Tensor]:
    eo = run.o[:, j].double() - gold_f.o[:, head]
    ed = run.delta[:, j].double() - gold_b.delta[:, head]
    o_mean, o_t = mech.signed_error(eo)
    d_mean, d_t = mech.signed_error(ed.unsqueeze(-1))
    dq_err = run.dq[:, j].double() - gold_b.dq[:, head]
    dk_err = run.dk[:, j].double() - gold_b.dk[:, head]
    if x64 is not None:  # dW_Q[h] = Σ_{b,t} dq[b,t]ᵀ x[b,t] (head_dim × n_embd)
        wq_err = torch.einsum("btd,btc->dc", dq_err, x64)
        wk_err = torch.einsum("btd,btc->dc", dk_err, x64)
        wq_ref = torch.einsum("btd,btc->dc", gold_b.dq[:, head], x64)
        wk_ref = torch.einsum("btd,btc->dc", gold_b.dk[:, head], x64)
    else:
        # Σ_T dK is exactly 0 (each row of dS sums to 0), so the proxies are measured against
        # the summed row norms instead of the norm of the sum.
        wq_err, wk_err = dq_err.sum(dim=(0, 1)), dk_err.sum(dim=(0, 1))
        wq_ref, wk_ref = _row_norm_sum(gold_b.dq[:, head]), _row_norm_sum(gold_b.dk[:, head])
    rows = int(ed.numel())
    rec: dict[str, Any] = {
        "rows": rows,
        "o_mean": o_mean,
        "o_t": o_t,
        "o_abs": float(eo.abs().mean()),
        "delta_mean": d_mean,
        "delta_t": d_t,
        "delta_sum": float(ed.sum()),
        "dq_rel": mech.relative_error(run.dq[:, j], gold_b.dq[:, head]),
        "dk_rel": mech.relative_error(run.dk[:, j], gold_b.dk[:, head]),
        "dv_rel": mech.relative_error(run.dv[:, j], gold_b.dv[:, head]),
        "wq_rel": _ratio(wq_err, wq_ref),
        "wk_rel": _ratio(wk_err, wk_ref),
        "tie_events": _total(run.tie_events, j),
        "p_bar_ones": _total(run.p_bar_ones, j),
    }
    return rec, ed.reshape(-1, ed.shape[-1]).cpu(), wq_err.cpu(), wk_err.cpu()


# -- helpers ----------------------------------------------------------------------------------
def _variant_groups(
    cells: Sequence[sr.CellView], variant: str, point: tuple[tuple[str, Any], ...]
) -> dict[int, LayerGroups]:
    """Per layer, the variant's head groups and specs (from a cell at the same grid point)."""
    from flashprobe.suites.cell_config import resolve_cell_config

    same = [c for c in cells if c.variant == variant and c.point == point]
    cell = (same or [c for c in cells if c.variant == variant])[0]
    try:
        model = resolve_cell_config(cell.config).train.model
    except FlashprobeError as exc:
        raise FlashprobeError(f"{cell.path}/config.json: {exc}") from None
    out: dict[int, LayerGroups] = {}
    for layer in range(model.n_layer):
        out[layer] = [
            (g.heads, g.attention.spec if g.attention.impl == "flashprobe" else None)
            for g in model.head_groups(layer)
        ]
    return out


def _replay_key(
    steps: Sequence[tuple[int, Any]], groups: Mapping[str, Mapping[int, LayerGroups]], backend: str
) -> str:
    files = []
    for step, path in steps:
        st = path.stat()
        files.append([step, path.name, st.st_size, st.st_mtime_ns])
    specs = {
        v: {
            str(layer): [[list(h), s.to_dict() if s else None] for h, s in g]
            for layer, g in by.items()
        }
        for v, by in groups.items()
    }
    blob = json.dumps(
        {"format": FORMAT, "files": files, "specs": specs, "backend": backend, "v": __version__},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _weight_source(docs: Sequence[Mapping[str, Any]]) -> str | None:
    kinds = sorted({str(d.get("weight_gradient")) for d in docs})
    return " / ".join(kinds) if kinds else None


def _steps(steps: Sequence[tuple[int, Any]]) -> list[int]:
    return [s for s, _ in steps]


def _ratio(err: torch.Tensor, ref: torch.Tensor) -> float:
    num = float(torch.linalg.vector_norm(err.flatten()))
    den = float(torch.linalg.vector_norm(ref.double().flatten()))
    return num / den if den > 0 else (0.0 if num == 0 else math.nan)


def _row_norm_sum(t: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(t.double(), dim=-1).sum().reshape(1)


def _total(t: torch.Tensor | None, j: int) -> float | None:
    return None if t is None else float(t[:, j].double().sum())


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
