"""The kernels' shared helpers (flashprobe.kernels.common) on hand-made edge values.

CPU cases run under Triton's interpreter (see tests/conftest.py); CUDA cases carry the `gpu` mark.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from flashprobe.kernels import launch
from flashprobe.kernels.common import count_at_least, count_ones, top2

INTERPRETED = launch.interpreting()
DEVICES = [
    pytest.param(
        "cpu", marks=pytest.mark.skipif(not INTERPRETED, reason="needs TRITON_INTERPRET=1")
    ),
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available() or INTERPRETED, reason="no GPU"),
        ],
    ),
]
ROWS, COLS = 16, 32


@triton.jit
def _row_helpers_kernel(X, THRESHOLD, TOP, SECOND, AT_LEAST, ONES_BF16, ONES_FP16, ONES_FUSED,
                        ONES_FP32, ROWS: tl.constexpr, COLS: tl.constexpr,
                        INTERPRET: tl.constexpr):  # fmt: skip
    rows = tl.arange(0, ROWS)
    x = tl.load(X + rows[:, None] * COLS + tl.arange(0, COLS)[None, :])
    first, second = top2(x)
    tl.store(TOP + rows, first)
    tl.store(SECOND + rows, second)
    tl.store(AT_LEAST + rows, count_at_least(x, tl.load(THRESHOLD + rows), INTERPRET))
    tl.store(ONES_BF16 + rows, count_ones(x, True, False, tl.bfloat16, INTERPRET))
    tl.store(ONES_FP16 + rows, count_ones(x, True, False, tl.float16, INTERPRET))
    tl.store(ONES_FUSED + rows, count_ones(x, True, True, tl.bfloat16, INTERPRET))
    tl.store(ONES_FP32 + rows, count_ones(x, False, False, tl.bfloat16, INTERPRET))


def row_helpers(x: torch.Tensor, threshold: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    if threshold is None:
        threshold = torch.zeros(ROWS, device=x.device)
    out = {name: torch.empty(ROWS, device=x.device) for name in ("top", "second")}
    for name in ("at_least", "bf16", "fp16", "fused", "fp32"):
        out[name] = torch.empty(ROWS, device=x.device, dtype=torch.int32)
    _row_helpers_kernel[(1,)](x, threshold, out["top"], out["second"], out["at_least"],
                              out["bf16"], out["fp16"], out["fused"], out["fp32"], ROWS, COLS,
                              INTERPRETED)  # fmt: skip
    return out


def below(value: float) -> float:
    return torch.nextafter(torch.tensor(value), torch.tensor(0.0)).item()


def above(value: float) -> float:
    return torch.nextafter(torch.tensor(value), torch.tensor(2.0)).item()


@pytest.mark.parametrize("device", DEVICES)
def test_count_ones_matches_rounding_the_tile(device: str) -> None:
    """count_ones decides on fp32 P̄ what rounding P̄ to 16 bits and comparing with 1 gives."""
    gen = torch.Generator().manual_seed(0)
    edges = []
    for mant in (7, 10):  # bf16, fp16: both midpoints around 1 round to 1
        low, high = 1 - 2.0 ** -(mant + 2), 1 + 2.0 ** -(mant + 1)
        edges += [below(low), low, above(low), below(high), high, above(high)]
    edges += [below(1.0), 1.0, above(1.0), 0.0, 0.5]
    x = torch.rand(ROWS, COLS, generator=gen)
    x[torch.rand(ROWS, COLS, generator=gen) < 0.5] = 1.0
    picks = torch.randint(len(edges), (ROWS, COLS), generator=gen)
    sprinkle = torch.rand(ROWS, COLS, generator=gen) < 0.5
    x = torch.where(sprinkle, torch.tensor(edges)[picks], x)
    # Standard and stabilized P̄ never exceed 1; the fused exponent's may (by its residual).
    p_std = x.clamp(max=1.0).to(device)
    got = row_helpers(p_std)
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        want = (p_std.to(dtype) == 1).sum(1, dtype=torch.int32)
        assert torch.equal(got[name].cpu(), want.cpu()), name
    assert torch.equal(got["fp32"].cpu(), (p_std == 1).sum(1, dtype=torch.int32).cpu())
    p_fused = x.to(device)
    want_fused = (p_fused.to(torch.bfloat16) == 1).sum(1, dtype=torch.int32)
    assert torch.equal(row_helpers(p_fused)["fused"].cpu(), want_fused.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_top2_counts_multiplicity(device: str) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(ROWS, COLS, generator=gen)
    x[0, 3] = x[0, 17] = 50.0  # a tied maximum: second == first
    x[1, 0] = 40.0  # the max in the first column, the second just below it
    x[1, 31] = below(40.0)
    x[2] = float("-inf")  # a fully masked row
    x[3, 5:] = float("-inf")  # a partly masked row
    x = x.to(device)
    got = row_helpers(x)
    ordered = x.sort(dim=1, descending=True).values
    assert torch.equal(got["top"].cpu(), ordered[:, 0].cpu())
    assert torch.equal(got["second"].cpu(), ordered[:, 1].cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_count_at_least_counts_every_entry_at_or_above_the_threshold(device: str) -> None:
    """Counts 0..COLS (the GPU path decodes a wrapped sum of 1.0f bit patterns), ties with
    the threshold, −inf entries and thresholds, and NaN entries (never counted)."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(ROWS, COLS, generator=gen)
    threshold = torch.randn(ROWS, generator=gen)
    threshold[0] = float("-inf")  # every entry counts: COLS
    threshold[1] = float("inf")  # none counts
    x[2] = threshold[2]  # all tie with the threshold
    x[3, ::2] = float("-inf")  # masked entries below any finite threshold
    x[4, 7] = float("nan")
    threshold[4] = x[4].nan_to_num(nan=0.0).min()  # all but the NaN count
    x[5, :] = 1.0
    threshold[5] = below(1.0)
    x[6, :] = below(1.0)
    threshold[6] = 1.0
    x, threshold = x.to(device), threshold.to(device)
    got = row_helpers(x, threshold)["at_least"].cpu()
    want = (x >= threshold[:, None]).sum(1, dtype=torch.int32).cpu()
    assert torch.equal(got, want)
    assert got[0] == COLS and got[1] == 0 and got[2] == COLS and got[4] == COLS - 1


def test_three_bf16_pieces_hold_an_fp32_value_exactly() -> None:
    """common.dot_f32's split: hi + mid + lo == x for every fp32 x with |x| >= 2^-110 (below, the
    smallest piece is subnormal and may lose bits: an absolute error under 2^-133), so the three
    bf16 tensor-core dots see exact products of the fp32 operand."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1 << 16, generator=gen) * torch.exp(torch.randn(1 << 16, generator=gen) * 20)
    x = torch.cat([x, torch.tensor([1.0, 1.0 - 2**-24, 2.0**-110, -7.5e20, 0.0])])
    x = x[(x.abs() >= 2.0**-110) | (x == 0)]
    hi = x.to(torch.bfloat16)
    rest = x - hi.float()
    mid = rest.to(torch.bfloat16)
    lo = (rest - mid.float()).to(torch.bfloat16)
    assert torch.equal((lo.double() + mid.double()) + hi.double(), x.double())
