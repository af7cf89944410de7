"""What the W_Q / W_K spectral norms cost a training run, and what other ways of computing them
would record instead (GPT-2 124M shape, one device).

    python tools/profile_spectral.py [--out OUT.json] [--repeats 5] [--device cuda]

Training records them every `metrics.spectral_every` steps (flashprobe.train.metrics
.qk_spectral_norms: 24 matrices of 768 × 768 and their 288 head blocks of 64 × 768). It used to
take one SVD call per matrix and per matrix's heads, 1.4 s per record on an H200 (GPU SVDs of
mid-size matrices are slow and run one matrix at a time); it now squares each Gram matrix 19
times in batched fp64 matmuls (`largest_singular_values`). This times that function and
alternatives on the same weights (a GPT-2 124M model after a few steps of random-gradient
updates, so that its singular values are not those of the initialisation):

    current          qk_spectral_norms as training calls it
    matrix-norm      torch.linalg.matrix_norm(ord=2) per matrix and per matrix's heads, in fp32
                     (what training called before)
    svdvals-DRIVER   torch.linalg.svdvals per matrix with each cuSOLVER driver (CUDA only)
    batched          one svdvals call for the 24 matrices and one for the 288 head blocks
    gram-eigvalsh    sqrt of the largest eigenvalue of W Wᵀ (fp64), batched
    gram-squaring    largest_singular_values (W Wᵀ squared 19 times, a Rayleigh quotient), batched
    cpu-fp64         the SVDs on the CPU in fp64 (the reference the others are compared with)

For each: milliseconds per call (median of --repeats, device synchronised) and the largest
relative difference from cpu-fp64 over the 312 norms. No training is changed by this tool.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from flashprobe.model import GPT  # noqa: E402
from flashprobe.model.config import ModelConfig  # noqa: E402
from flashprobe.train.metrics import largest_singular_values, qk_spectral_norms  # noqa: E402

Norms = tuple[torch.Tensor, torch.Tensor]  # (24 whole-matrix norms, 24 × 12 head norms)


def weights(model: GPT) -> tuple[torch.Tensor, int]:
    """The 24 W_Q / W_K matrices stacked (layer-major), fp32, and the head dim."""
    mats = [w.detach().float() for layer in range(model.config.n_layer)
            for w in model.qk_weights(layer)]  # fmt: skip
    return torch.stack(mats), model.config.head_dim


def per_matrix(stack: torch.Tensor, head_dim: int, norm: Callable[[torch.Tensor], torch.Tensor]):
    whole = torch.stack([norm(w) for w in stack])
    heads = torch.stack([norm(w.view(-1, head_dim, w.shape[-1])) for w in stack])
    return whole, heads


def batched(stack: torch.Tensor, head_dim: int, norm: Callable[[torch.Tensor], torch.Tensor]):
    heads = norm(stack.view(stack.shape[0], -1, head_dim, stack.shape[-1]).flatten(0, 1))
    return norm(stack), heads.view(stack.shape[0], -1)


def largest_singular(driver: str | None) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda a: torch.linalg.svdvals(a, driver=driver)[..., 0]


def gram_norm(a: torch.Tensor) -> torch.Tensor:
    g = a.double() @ a.double().transpose(-1, -2)
    return torch.linalg.eigvalsh(g)[..., -1].clamp_min(0).sqrt().float()


def timed(fn: Callable[[], Norms], repeats: int, device: torch.device) -> tuple[float, Norms]:
    out = fn()  # warm-up (cuSOLVER handles, workspaces)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = ModelConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=256,
                       bias=False)  # fmt: skip
    model = GPT(config).to(device)
    with torch.no_grad():  # move the weights off their initial spectrum
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    stack, head_dim = weights(model)

    def current() -> Norms:
        record = qk_spectral_norms(model)
        pairs = list(zip(record["wq"], record["wk"], strict=True))
        heads = list(zip(record["wq_heads"], record["wk_heads"], strict=True))
        whole = torch.tensor([v for pair in pairs for v in pair], dtype=torch.float64)
        return whole, torch.tensor([h for pair in heads for h in pair], dtype=torch.float64)

    candidates: dict[str, Callable[[], Norms]] = {"current": current}
    matrix_norm = lambda a: torch.linalg.matrix_norm(a, ord=2)  # noqa: E731
    candidates["matrix-norm"] = lambda: per_matrix(stack, head_dim, matrix_norm)
    drivers = ("gesvd", "gesvdj", "gesvda") if device.type == "cuda" else (None,)
    for driver in drivers:
        name = f"svdvals-{driver}" if driver else "svdvals"
        norm = largest_singular(driver)
        candidates[name] = lambda norm=norm: per_matrix(stack, head_dim, norm)
    candidates["batched"] = lambda: batched(stack, head_dim, largest_singular(None))
    candidates["gram-eigvalsh"] = lambda: batched(stack, head_dim, gram_norm)
    candidates["gram-squaring"] = lambda: batched(stack, head_dim, largest_singular_values)
    cpu = stack.cpu().double()
    candidates["cpu-fp64"] = lambda: batched(cpu, head_dim, largest_singular(None))

    _, (ref_whole, ref_heads) = timed(candidates["cpu-fp64"], 1, torch.device("cpu"))
    rows = []
    for name, fn in candidates.items():
        try:
            ms, (whole, heads) = timed(fn, args.repeats, device)
        except RuntimeError as exc:  # a driver this build lacks
            rows.append({"method": name, "error": str(exc).splitlines()[0][:120]})
            continue
        diff = max(
            ((whole.double().cpu() - ref_whole).abs() / ref_whole).max().item(),
            ((heads.double().cpu().reshape(ref_heads.shape) - ref_heads).abs() / ref_heads)
            .max()
            .item(),
        )
        rows.append({"method": name, "ms": round(ms, 2), "max_rel_diff": diff})
        print(f"{name:16s} {ms:9.2f} ms   max rel diff vs cpu-fp64 {diff:.2e}")
    payload = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
