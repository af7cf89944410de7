"""Attention speed: flashprobe's Triton kernels against PyTorch SDPA's flash and cuDNN backends
and, where installed, FlashAttention-2 and -3 (`flash_attn_peers`).

Every peer is timed in the same process on the same inputs with `triton.testing.do_bench`
(median), so the printed ratios compare like with like; a peer taking another layout gets
copies of the same inputs, made before timing. FLOPs follow the Triton tutorial and
FlashAttention benchmarks: 4·B·H·N²·D for the forward, halved when causal, ×2.5 for the backward.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import torch

from flashprobe.errors import FlashprobeError
from flashprobe.probes import flash_attn_peers
from flashprobe.spec import KernelSpec, make_spec

MODES = ("fwd", "bwd", "fwd+bwd")
#: --dq: how the presets' backward sums dQ (kernels.launch.DqAccumulation), "both" times each.
DQ_CHOICES = {"ordered": ("ordered",), "atomic": ("atomic",), "both": ("ordered", "atomic")}
ATOMIC_SUFFIX = "+atomic-dq"
PEERS = ("sdpa-flash", "sdpa-cudnn", *(p.name for p in flash_attn_peers.PEERS.values()))
_BWD_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class BenchShape:
    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    dtype: str = "bf16"
    kv_heads: int | None = None  # grouped-query attention: k, v heads (None: `heads`)

    def flops(self, mode: str) -> float:
        dense = 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        return dense * (0.5 if self.causal else 1.0) * _BWD_FACTOR[mode]

    def label(self) -> str:
        mask = "causal" if self.causal else "full"
        heads = f"{self.heads}" if self.kv_heads is None else f"{self.heads}/{self.kv_heads}"
        return f"B{self.batch} H{heads} N{self.seq} D{self.head_dim} {mask}"

    @property
    def grouped(self) -> bool:
        return self.kv_heads is not None and self.kv_heads != self.heads


@dataclass(frozen=True)
class Implementation:
    """Something to time: a flashprobe spec (optionally instrumented; its backward's dQ summed
    in order or with atomics), an SDPA backend or a FlashAttention generation (2 or 3)."""

    name: str
    spec: KernelSpec | None = None
    instrument: bool = False
    sdpa_backend: str | None = None
    flash_attn: int | None = None
    dq_accumulation: str = "ordered"

    @property
    def layout(self) -> str:
        """How its q, k, v, dO are laid out: FlashAttention's own kernels take [B, N, H, D]."""
        return "bnhd" if self.flash_attn is not None else "bhnd"


@dataclass(frozen=True)
class Timing:
    shape: BenchShape
    impl: str
    mode: str
    ms: float | None  # None: the implementation does not support this shape here
    tflops: float | None
    note: str = ""
    samples: tuple[float, ...] = ()  # ms of each round-robin round (ms is their median)

    def to_dict(self) -> dict:
        return {
            **asdict(self.shape),
            "impl": self.impl,
            "mode": self.mode,
            "ms": self.ms,
            "tflops": self.tflops,
            "note": self.note,
            "samples_ms": list(self.samples),
        }


def default_shapes(
    seqs: Sequence[int] = (1024, 2048, 4096, 8192, 16384),
    head_dims: Sequence[int] = (64, 128),
    tokens: int = 32768,
    heads: int = 16,
    dtype: str = "bf16",
    kv_heads: int | None = None,
) -> list[BenchShape]:
    """The issue's default grid: batch × seq = `tokens`, causal and not (`kv_heads` key/value
    heads shared by the query heads, for grouped-query attention)."""
    if heads < 1:  # 0 % kv_heads passes the check below
        raise FlashprobeError(f"--heads must be at least 1, got {heads}")
    if dtype not in _DTYPES:  # named here, before the GPU check, on any machine
        raise FlashprobeError(f"--dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    for head_dim in head_dims:
        if head_dim < 1:
            raise FlashprobeError(f"--head-dim must be at least 1, got {head_dim}")
    if kv_heads is not None and (kv_heads <= 0 or heads % kv_heads):
        raise FlashprobeError(f"kv heads must divide the {heads} heads, got {kv_heads}")
    shapes = []
    for head_dim in head_dims:
        for causal in (True, False):
            for seq in seqs:
                if seq <= 0 or tokens < seq:
                    raise FlashprobeError(f"need tokens >= seq > 0, got tokens={tokens} seq={seq}")
                shapes.append(
                    BenchShape(tokens // seq, heads, seq, head_dim, causal, dtype, kv_heads)
                )
    return shapes


def implementations(
    presets: Iterable[str], instrumented: bool, peers: bool, dq: str = "ordered"
) -> list[Implementation]:
    """Each preset once per dQ accumulation of `dq` (DQ_CHOICES; atomic ones named
    `<preset>+atomic-dq`), the first of them instrumented too, then the peers."""
    if dq not in DQ_CHOICES:
        raise FlashprobeError(f"--dq must be one of {', '.join(DQ_CHOICES)}, got {dq!r}")
    impls = [
        Implementation(name + (ATOMIC_SUFFIX if how == "atomic" else ""), spec=make_spec(name),
                       dq_accumulation=how)
        for name in presets
        for how in DQ_CHOICES[dq]
    ]  # fmt: skip
    if instrumented and impls:
        first = impls[0]
        impls.append(Implementation(f"{first.name}+stats", spec=first.spec, instrument=True,
                                    dq_accumulation=first.dq_accumulation))  # fmt: skip
    if peers:
        impls += [
            Implementation("sdpa-flash", sdpa_backend="FLASH_ATTENTION"),
            Implementation("sdpa-cudnn", sdpa_backend="CUDNN_ATTENTION"),
            *(Implementation(p.name, flash_attn=g) for g, p in flash_attn_peers.PEERS.items()),
        ]
    return impls


def peer_versions(impls: Iterable[Implementation]) -> dict[str, str | None]:
    """The version of the library behind each peer, for the record (None: not installed)."""
    versions: dict[str, str | None] = {}
    for impl in impls:
        if impl.flash_attn is not None:
            versions[impl.name] = flash_attn_peers.version(impl.flash_attn)
        elif impl.sdpa_backend == "CUDNN_ATTENTION":
            cudnn = torch.backends.cudnn.version()
            versions[impl.name] = None if cudnn is None else f"cudnn {cudnn}"
        elif impl.sdpa_backend is not None:
            versions[impl.name] = f"torch {torch.__version__}"
    return versions


def run_benchmark(
    shapes: Sequence[BenchShape],
    impls: Sequence[Implementation],
    modes: Sequence[str] = MODES,
    *,
    seed: int = 0,
    repeats: int = 1,
    progress: Callable[[str], None] | None = None,
    device: str = "cuda",
    timer: Callable[[Callable[[], None]], float] | None = None,
) -> list[Timing]:
    """Time every (shape, implementation, mode); needs CUDA.

    With `repeats` > 1 the implementations of one shape are timed round-robin that many times
    and each keeps the median of its rounds, so a drift of the GPU's clock over the minutes a
    grid takes falls on all of them alike rather than on whichever ran last. An implementation
    that cannot run a shape (a peer not installed, a backend not built for it) gets a timing
    without ms and a one-line note. `device` and `timer` (ms of one step) let tests run the
    plumbing on the CPU; the default is `do_bench`'s median on the GPU.
    """
    for mode in modes:
        if mode not in MODES:
            raise FlashprobeError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if repeats < 1:
        raise FlashprobeError(f"repeats must be at least 1, got {repeats}")
    if not 0 <= seed < 2**63:  # torch.Generator.manual_seed's range
        raise FlashprobeError(f"--seed must be in [0, 2**63), got {seed}")
    if device == "cuda" and not torch.cuda.is_available():
        raise FlashprobeError("flashprobe bench needs a CUDA GPU; none is visible here")
    timer = timer or _do_bench_median

    timings: list[Timing] = []
    by_name = {impl.name: impl for impl in impls}
    for shape in shapes:
        inputs = {"bhnd": make_inputs(shape, seed, device)}
        steps: dict[tuple[str, str], Callable[[], None]] = {}
        samples: dict[tuple[str, str], list[float]] = {}
        failed: dict[tuple[str, str], str] = {}
        for impl in impls:
            for mode in modes:
                if impl.instrument and mode == "bwd":
                    continue  # instrumentation lives in the forward; its backward is the same
                key = (impl.name, mode)
                samples[key] = []
                try:
                    attend = attend_fn(impl, shape)  # a peer not installed raises here
                    steps[key] = step_fn(attend, *_in_layout(inputs, impl.layout), mode)
                except _errors(impl) as exc:  # e.g. a backend not built here
                    failed[key] = _note(impl, exc)
        for round_ in range(repeats):
            for key, step in steps.items():
                if key in failed:
                    continue
                if progress:
                    suffix = f" (round {round_ + 1}/{repeats})" if repeats > 1 else ""
                    progress(f"{shape.label()} {key[0]} {key[1]}{suffix}")
                try:
                    samples[key].append(timer(step))
                except _errors(by_name[key[0]]) as exc:
                    failed[key] = _note(by_name[key[0]], exc)
        for (name, mode), times in samples.items():
            if (name, mode) in failed:
                timings.append(Timing(shape, name, mode, None, None, failed[(name, mode)]))
            else:
                ms = statistics.median(times)
                timings.append(Timing(shape, name, mode, ms, shape.flops(mode) / ms * 1e-9,
                                      samples=tuple(times)))  # fmt: skip
        del inputs, steps
        if device == "cuda":
            torch.cuda.empty_cache()
    return timings


def _errors(impl: Implementation) -> tuple[type[Exception], ...]:
    """What counts as "cannot run this shape here" rather than a bug: for a peer, whatever its
    library raises for a shape, dtype or GPU it does not support (a peer never stops the run)."""
    ours = (RuntimeError, FlashprobeError)
    if impl.spec is not None:
        return ours
    return (*ours, ValueError, AssertionError, NotImplementedError, TypeError)


def _do_bench_median(step: Callable[[], None]) -> float:
    from triton.testing import do_bench

    return do_bench(step, warmup=25, rep=100, return_mode="median")


def _in_layout(
    inputs: dict[str, tuple[torch.Tensor, ...]], layout: str
) -> tuple[torch.Tensor, ...]:
    """q, k, v, dO in `layout`, copied once per shape from [B, H, N, D] (outside any timing)."""
    if layout not in inputs:
        inputs[layout] = to_layout(inputs["bhnd"], layout)
    return inputs[layout]


def _note(impl: Implementation, exc: BaseException) -> str:
    """The one line a failed timing shows: a peer's refusal reads "unsupported: <reason>"."""
    line = _first_line(exc)
    if impl.spec is None and not line.startswith((flash_attn_peers.NOT_INSTALLED, "unsupported")):
        return f"unsupported: {line}"
    return line


def ratio_table(timings: Sequence[Timing], baseline: str) -> dict[tuple, float | None]:
    """ratio[(shape, impl, mode)] = impl TFLOP/s ÷ baseline TFLOP/s on the same shape and mode."""
    by_key = {(t.shape, t.impl, t.mode): t for t in timings}
    out: dict[tuple, float | None] = {}
    for (shape, impl, mode), t in by_key.items():
        base = by_key.get((shape, baseline, mode))
        ok = t.tflops and base is not None and base.tflops
        out[(shape, impl, mode)] = t.tflops / base.tflops if ok else None
    return out


# -- building blocks (also used by scripts/gpu_kernels.py) -------------------------------
def make_inputs(shape: BenchShape, seed: int = 0, device: str = "cuda") -> tuple[torch.Tensor, ...]:
    """q, k, v, dO as [B, H, N, D] (k, v with the key/value heads)."""
    if shape.dtype not in _DTYPES:
        raise FlashprobeError(f"dtype must be one of {', '.join(_DTYPES)}, got {shape.dtype!r}")
    gen = torch.Generator(device=device).manual_seed(seed)
    size = (shape.batch, shape.heads, shape.seq, shape.head_dim)
    kv_size = (shape.batch, shape.kv_heads or shape.heads, shape.seq, shape.head_dim)
    dtype = _DTYPES[shape.dtype]
    q, k, v, do = (
        torch.randn(s, device=device, dtype=dtype, generator=gen)
        for s in (size, kv_size, kv_size, size)
    )
    return q, k, v, do


def to_layout(tensors: Sequence[torch.Tensor], layout: str) -> tuple[torch.Tensor, ...]:
    """[B, H, N, D] tensors as contiguous copies in `layout` ("bhnd" or "bnhd")."""
    if layout == "bhnd":
        return tuple(tensors)
    if layout == "bnhd":
        return tuple(t.transpose(1, 2).contiguous() for t in tensors)
    raise FlashprobeError(f"unknown layout {layout!r}")


def attend_fn(impl: Implementation, shape: BenchShape) -> Callable[..., torch.Tensor]:
    """attend(q, k, v) on tensors in `impl.layout` (`to_layout`)."""
    scale = 1.0 / math.sqrt(shape.head_dim)
    if impl.flash_attn is not None:
        return flash_attn_peers.attend_fn(impl.flash_attn, shape, scale)
    if impl.spec is not None:
        from flashprobe.backends import load_triton

        # What flashprobe.attention(backend="triton") runs, with the dQ accumulation as a
        # launch option (the API leaves it ordered).
        triton_attention = load_triton()

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = triton_attention(
                q,
                k,
                v,
                causal=shape.causal,
                spec=impl.spec,
                scale=scale,
                return_stats=impl.instrument,
                dq_accumulation=impl.dq_accumulation,
            )
            return out[0] if impl.instrument else out

        return attend

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = getattr(SDPBackend, impl.sdpa_backend or "")

    def attend_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel([backend]):
            return scaled_dot_product_attention(
                q, k, v, is_causal=shape.causal, scale=scale, enable_gqa=shape.grouped
            )

    return attend_sdpa


def step_fn(
    attend: Callable[..., torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    mode: str,
) -> Callable[[], None]:
    if mode == "fwd":
        return lambda: attend(q, k, v)
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    if mode == "fwd+bwd":
        return lambda: attend(*leaves).backward(do)
    out = attend(*leaves)  # bwd alone: one forward, then time backward on the kept graph

    def backward() -> None:
        for leaf in leaves:
            leaf.grad = None
        out.backward(do, retain_graph=True)

    return backward


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:120]
