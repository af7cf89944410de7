"""Does the stabilized softmax underflow when a tied maximum logit is large? (one GPU call)

    python scripts/check_sfa_underflow.py

Rows whose two largest scores tie at S_max (natural units) and whose other scores sit 1-10
below: the stabilized max is β·S_max, so the tied P̄ = exp(-(β-1)·S_max) underflows fp32 once
(β-1)·S_max > ~87 (~103 with subnormals), ℓ becomes 0 and O = 0/0. A tied *negative* maximum
sets the max to 0 whatever β is, so P̄ = exp(S_max) underflows once S_max < ~-87 (~-103).
Prints, per variant and S_max, whether O is finite on the Triton kernel (CUDA only) and on the
emulator, and their difference. Takes no options (without a CUDA GPU: the emulator alone).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashprobe.errors import OneLineParser  # noqa: E402 (after the path)


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


VARIANTS = (
    ("fa2", {}), ("sfa", {}), ("paper-code", {}), ("paper-sfa", {}), ("paper-sfa", {"beta": 1.125}),
)  # fmt: skip
S_MAX = (-160.0, -110.0, -100.0, -90.0, -80.0, -40.0, 40.0, 80.0, 90.0, 100.0, 160.0, 680.0, 720.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(
        prog=Path(__file__).name,
        description=__doc__.split("\n")[0],
        epilog="Prints one row per variant and S_max; takes no options.",
    )
    parser.parse_args(argv)

    import torch

    from flashprobe.reference.emulator import emulate_forward
    from flashprobe.spec import make_spec

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    print(f"device: {torch.cuda.get_device_name() if cuda else 'cpu (emulator only)'}")
    print("variant                S_max  triton_finite  emulator_finite  max|triton-emulator|")
    for preset, overrides in VARIANTS:
        spec = make_spec(preset, overrides)
        name = preset + "".join(f":{k}={v}" for k, v in overrides.items())
        for s_max in S_MAX:
            (q, k, v), scale = rows(s_max, device=device)
            o_e = emulate_forward(q, k, v, spec, causal=False, scale=scale).o
            triton, diff = "-", "-"
            if cuda:
                from flashprobe.kernels import triton_attention

                o_t = triton_attention(q, k, v, causal=False, spec=spec, scale=scale)
                triton = str(bool(torch.isfinite(o_t).all()))
                diff = f"{(o_t.float() - o_e.float()).abs().max().item():.3g}"
            print(
                f"{name:<22} {s_max:>5.0f}  {triton:<14} "
                f"{bool(torch.isfinite(o_e).all())!s:<16} {diff}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
