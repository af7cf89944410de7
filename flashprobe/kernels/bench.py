"""Timing and tuning of the Triton kernels on a CUDA GPU (used by scripts/gpu_kernels.py).

`benchmark` times one implementation on one shape (TFLOP/s as in the Triton tutorial:
4·B·H·N²·D, ×0.5 causal, ×2.5 backward; `triton.testing.do_bench` medians). `tune_forward` and
`tune_backward` time candidate launch configurations for one kernel variant and return the
fastest; their results go to kernels/tuned/<arch>.json so that runs never tune.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from flashprobe.kernels import launch, tuning
from flashprobe.spec import KernelSpec, make_spec


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    dtype: torch.dtype = torch.bfloat16

    def flops(self, mode: str) -> float:
        dense = 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        return dense * (0.5 if self.causal else 1.0) * (2.5 if mode == "bwd" else 1.0)

    def inputs(self, seed: int = 0) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        size = (self.batch, self.heads, self.seq, self.head_dim)
        return tuple(
            torch.randn(size, device="cuda", dtype=self.dtype, generator=gen) for _ in range(4)
        )


def fwd_candidates(head_dim: int) -> list[tuning.FwdConfig]:
    out = []
    for block_m in (64, 128):
        for num_warps in (4, 8):
            for num_stages in (2, 3, 4):
                if block_m == 64 and num_warps == 8:
                    continue
                out.append(tuning.FwdConfig(block_m, 64, num_warps, num_stages))
    return out


def bwd_candidates(head_dim: int) -> list[tuning.BwdConfig]:
    blocks = [(32, 128, 128, 32), (64, 128, 128, 64), (32, 64, 64, 32), (64, 64, 64, 64)]
    out = []
    for bm1, bn1, bm2, bn2 in blocks:
        for num_warps in (4, 8):
            for num_stages in (2, 3):
                if bn1 == 64 and num_warps == 8:
                    continue
                out.append(tuning.BwdConfig(bm1, bn1, bm2, bn2, num_warps, num_stages))
    return out


def forward_fn(
    shape: Shape,
    spec: KernelSpec,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    instrument: bool = False,
    config: tuning.FwdConfig | None = None,
) -> Callable[[], object]:
    scale = 1.0 / math.sqrt(shape.head_dim)
    return lambda: launch.attention_forward(
        q, k, v, causal=shape.causal, spec=spec, scale=scale, instrument=instrument,
        keep_o_fp32=spec.delta_source == "o_fp32", config=config,
    )  # fmt: skip


def backward_fn(
    shape: Shape,
    spec: KernelSpec,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    *,
    config: tuning.BwdConfig | None = None,
) -> Callable[[], object]:
    """The backward alone (δ preprocess + dK/dV/dQ kernel) on saved forward outputs."""
    scale = 1.0 / math.sqrt(shape.head_dim)
    fwd = launch.attention_forward(q, k, v, causal=shape.causal, spec=spec, scale=scale,
                                   keep_o_fp32=spec.delta_source == "o_fp32")  # fmt: skip
    return lambda: launch.attention_backward(
        q, k, v, fwd.o, fwd.lse, do, causal=shape.causal, spec=spec, scale=scale,
        o_fp32=fwd.o_fp32, config=config,
    )  # fmt: skip


def sdpa_fn(
    shape: Shape, backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    do: torch.Tensor, mode: str,
) -> Callable[[], object]:  # fmt: skip
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    chosen = getattr(SDPBackend, backend)
    scale = 1.0 / math.sqrt(shape.head_dim)

    def forward(*args: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel([chosen]):
            return scaled_dot_product_attention(*args, is_causal=shape.causal, scale=scale)

    if mode == "fwd":
        return lambda: forward(q, k, v)
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    out = forward(*leaves)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def time_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def benchmark(
    shape: Shape, impl: str, mode: str, spec: KernelSpec | str | None = None, seed: int = 0
) -> tuple[float, float]:
    """(ms, TFLOP/s) of `impl` ('triton', 'triton+stats', 'sdpa-flash', 'sdpa-cudnn')."""
    q, k, v, do = shape.inputs(seed)
    if impl.startswith("sdpa"):
        backend = "FLASH_ATTENTION" if impl == "sdpa-flash" else "CUDNN_ATTENTION"
        fn = sdpa_fn(shape, backend, q, k, v, do, mode)
    else:
        kernel_spec = make_spec(spec)
        if mode == "fwd":
            fn = forward_fn(shape, kernel_spec, q, k, v, instrument=impl.endswith("+stats"))
        else:
            fn = backward_fn(shape, kernel_spec, q, k, v, do)
    ms = time_ms(fn)
    return ms, shape.flops(mode) / ms * 1e-9


def tune_forward(
    shape: Shape, spec: KernelSpec, candidates: Iterable[tuning.FwdConfig]
) -> list[tuple[tuning.FwdConfig, float]]:
    """(config, ms) per candidate, fastest first; a candidate that fails to launch gets inf."""
    q, k, v, _ = shape.inputs()
    return _fastest_first(candidates, lambda c: forward_fn(shape, spec, q, k, v, config=c))


def tune_backward(
    shape: Shape, spec: KernelSpec, candidates: Iterable[tuning.BwdConfig]
) -> list[tuple[tuning.BwdConfig, float]]:
    q, k, v, do = shape.inputs()
    return _fastest_first(candidates, lambda c: backward_fn(shape, spec, q, k, v, do, config=c))


def _fastest_first(candidates: Iterable, make_fn: Callable) -> list:
    timings = []
    for config in candidates:
        try:
            timings.append((config, time_ms(make_fn(config))))
        except Exception as exc:
            print(f"  skip {config}: {str(exc).splitlines()[0][:100]}")
            timings.append((config, math.inf))
    return sorted(timings, key=lambda item: item[1])
