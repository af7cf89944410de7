"""Does the stabilized softmax underflow when a tied maximum logit is large? (one GPU call)

    python scripts/check_sfa_underflow.py

Rows whose two largest scores tie at S_max (natural units) and whose other scores sit 1-10
below: the stabilized max is β·S_max, so the tied P̄ = exp(-(β-1)·S_max) underflows fp32 once
(β-1)·S_max > ~87 (~103 with subnormals), ℓ becomes 0 and O = 0/0. Prints, per preset and
S_max, whether O is finite on the Triton kernel and on the emulator, and their difference.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rows(s_max: float, n: int = 256, d: int = 64, device: str = "cuda"):
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    # q = e_0 scaled, k rows chosen so that q·k·scale gives the wanted scores exactly enough.
    scale = 1.0 / math.sqrt(d)
    scores = s_max - 1.0 - 9.0 * torch.rand(n, generator=gen)
    scores[3] = scores[7] = s_max
    q = torch.zeros(1, 1, 1, d)
    q[..., 0] = 8.0
    k = torch.randn(1, 1, n, d, generator=gen) * 0.01
    k[0, 0, :, 0] = scores / (8.0 * scale)
    v = torch.randn(1, 1, n, d, generator=gen) - 2.5
    return [t.to(device=device, dtype=torch.bfloat16) for t in (q, k, v)], scale


def main() -> None:
    import torch

    from flashprobe.kernels import triton_attention
    from flashprobe.reference.emulator import emulate_forward
    from flashprobe.spec import make_spec

    print("preset     S_max  triton_finite  emulator_finite  max|triton-emulator|  lse_triton")
    for preset in ("fa2", "sfa", "paper-code", "paper-sfa"):
        spec = make_spec(preset)
        for s_max in (40.0, 60.0, 80.0, 90.0, 100.0, 110.0, 160.0):
            (q, k, v), scale = rows(s_max)
            o_t, stats = triton_attention(
                q, k, v, causal=False, spec=spec, scale=scale, return_stats=True
            )
            o_e = emulate_forward(q, k, v, spec, causal=False, scale=scale).o
            diff = (o_t.float() - o_e.float()).abs().max().item()
            print(
                f"{preset:<10} {s_max:>5.0f}  {bool(torch.isfinite(o_t).all())!s:<14} "
                f"{bool(torch.isfinite(o_e).all())!s:<16} {diff:<21.3g} "
                f"{stats.lse.flatten()[0].item():.4g}"
            )


if __name__ == "__main__":
    main()
