"""Per-step metrics (flashprobe.train.metrics): W_Q / W_K spectral norms against fp64 SVDs, and
the JSONL step log."""

from __future__ import annotations

import json
import math

import pytest
import torch

from flashprobe.model import GPT, ModelConfig
from flashprobe.train.metrics import (
    SPECTRAL_SQUARINGS,
    intact_end,
    largest_singular_values,
    qk_spectral_norms,
    truncate_jsonl,
)

RTOL = 1e-5  # largest allowed relative difference from an fp64 SVD


def _reference(mats: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(mats.double())[..., 0]


def _relative_error(mats: torch.Tensor, **kwargs) -> torch.Tensor:
    ref = _reference(mats)
    return (largest_singular_values(mats, **kwargs) - ref).abs() / ref


def _with_spectrum(singular: torch.Tensor, m: int, n: int, seed: int) -> torch.Tensor:
    """An m × n fp64 matrix with these singular values and random singular vectors."""
    gen = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(m, m, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, m, generator=gen, dtype=torch.float64))
    return u @ torch.diag(singular) @ v.T


def _random(seed: int) -> torch.Tensor:
    return torch.randn(768, 768, generator=torch.Generator().manual_seed(seed)) * 0.02


def _trained_like(seed: int) -> torch.Tensor:
    """Init-scale noise plus a few large rank-1 directions, as W_Q / W_K grow in training."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(768, 768, generator=gen) * 0.02
    for strength in (3.0, 2.9, 1.5, 0.8):
        left, right = torch.randn(2, 768, generator=gen)
        w += strength / 768 * torch.outer(left, right)
    return w


def _near_tie(seed: int) -> torch.Tensor:
    """σ₁ and σ₂ 1e-6 apart (relative), the rest well below: power iteration cannot split them."""
    gen = torch.Generator().manual_seed(seed)
    rest = torch.rand(254, generator=gen, dtype=torch.float64) * 0.9
    return _with_spectrum(torch.cat([torch.tensor([1.0, 1.0 - 1e-6]), rest]), 256, 384, seed)


def _orthogonal(seed: int) -> torch.Tensor:
    return 3.0 * _with_spectrum(torch.ones(256, dtype=torch.float64), 256, 256, seed)


def _rank_one(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.outer(torch.randn(64, generator=gen), torch.randn(768, generator=gen))


def _tall(seed: int) -> torch.Tensor:
    return torch.randn(300, 40, generator=torch.Generator().manual_seed(seed))


CASES = {"random": _random, "trained-like": _trained_like, "near-tie": _near_tie,
         "orthogonal": _orthogonal, "rank-one": _rank_one, "tall": _tall}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_largest_singular_value_matches_an_fp64_svd(case) -> None:
    mats = torch.stack([CASES[case](seed) for seed in range(2)])
    got, ref = largest_singular_values(mats), _reference(mats)
    assert ((got - ref).abs() / ref).max() <= RTOL
    assert (got <= ref * (1 + 1e-12)).all()  # a Rayleigh quotient: never above σ₁


def _adversarial(m: int, squarings: int) -> torch.Tensor:
    """The worst case of the method's bound: G's top eigenvector avoids coordinate 0, the second
    one is that coordinate, and (λ₂/λ₁)^2N = 2/m, so column 0 of G^N is the largest and is all
    the second eigenvector: the quotient gives λ₂ = λ₁·(2/m)^(1/2N), short by ≈ ln(m/2)/2N."""
    top = torch.cat([torch.zeros(1), torch.ones(m - 1)]).double() / (m - 1) ** 0.5
    rest, _ = torch.linalg.qr(torch.randn(m - 1, m - 2, dtype=torch.float64,
                                          generator=torch.Generator().manual_seed(0)))  # fmt: skip
    rest = rest - torch.outer(top[1:], top[1:] @ rest)  # orthogonal to top
    rest, _ = torch.linalg.qr(rest)
    u = torch.zeros(m, m, dtype=torch.float64)
    u[:, 0], u[0, 1], u[1:, 2:] = top, 1.0, rest
    ratio = (2 / m) ** (1 / 2 ** (squarings + 1))  # λ₂ / λ₁
    eig = torch.cat([torch.tensor([1.0, ratio]), torch.full((m - 2,), 0.25)]).double()
    return u * eig.sqrt()  # W with W Wᵀ = U diag(eig) Uᵀ


def test_the_worst_case_stays_within_the_bound_and_needs_every_squaring() -> None:
    m = 768
    worst = _adversarial(m, SPECTRAL_SQUARINGS)
    error = _relative_error(worst[None]).item()
    bound = math.log(m) / 2 ** (SPECTRAL_SQUARINGS + 2)
    assert 0.5 * bound < error <= bound <= RTOL  # the bound is nearly attained and under 1e-5
    # Two squarings fewer (N / 4) miss 1e-5 on a matrix built the same way for them.
    assert _relative_error(_adversarial(m, SPECTRAL_SQUARINGS - 2)[None],
                           squarings=SPECTRAL_SQUARINGS - 2).item() > RTOL  # fmt: skip


def test_zero_matrices_give_zero_and_batches_keep_their_shape() -> None:
    mats = torch.zeros(2, 3, 64, 96)
    mats[1, 2] = _rank_one(0)[:, :96]
    out = largest_singular_values(mats)
    assert out.shape == (2, 3) and out.dtype == torch.float64
    assert out[0].eq(0).all() and out[1, :2].eq(0).all()
    assert abs(out[1, 2] / _reference(mats[1, 2]) - 1) <= RTOL


def test_the_column_of_largest_norm_is_taken_not_a_fixed_one() -> None:
    # σ₁'s singular vector avoids coordinate 0 (the first column of G^N holds only σ₂ there):
    # the bound rests on taking the column of largest norm.
    gen = torch.Generator().manual_seed(0)
    w = torch.zeros(2, 64, 96, dtype=torch.float64)
    w[:, 2:, 2:] = 0.01 * torch.randn(2, 62, 94, generator=gen, dtype=torch.float64)
    w[:, 0, 0], w[:, 1, 1] = 0.5, 1.0
    assert _relative_error(w).max() <= RTOL
    assert _relative_error(w.mT).max() <= RTOL  # tall: the Gram matrix of the smaller side


@pytest.mark.parametrize("scale", [1e-200, 1e-30, 1e30, 1e200])
def test_any_scale_is_safe(scale) -> None:
    # G = W Wᵀ of these would over- or underflow fp64 without the scaling to a largest entry 1.
    mats = torch.stack([_rank_one(0)[:, :96], _random(0)[:64, :96]]).double() * scale
    assert _relative_error(mats).max() <= RTOL


def test_non_finite_weights_give_nan_not_an_error() -> None:
    mats = torch.stack([_rank_one(0), _rank_one(1), _rank_one(2)]).double()
    mats[0, 3, 5], mats[1, 0, 0] = math.nan, math.inf
    out = largest_singular_values(mats)
    assert out[:2].isnan().all() and abs(out[2] / _reference(mats[2]) - 1) <= RTOL


@pytest.mark.parametrize("kv_heads", [None, 2])
def test_spectral_norms_per_layer_and_head_match_an_fp64_svd(kv_heads) -> None:
    torch.manual_seed(0)
    config = {"n_layer": 2, "n_head": 4, "n_kv_head": kv_heads, "n_embd": 256, "block_size": 8,
              "vocab_size": 64}  # fmt: skip
    model = GPT(ModelConfig.from_dict(config))
    with torch.no_grad():  # off the initial spectrum: a few strong directions, as after training
        for layer in range(2):
            for weight in model.qk_weights(layer):
                weight += 0.05 * torch.randn(weight.shape[0], 2) @ torch.randn(2, weight.shape[1])
    norms = qk_spectral_norms(model)
    assert set(norms) == {"wq", "wk", "wq_heads", "wk_heads"}
    for layer in range(2):
        for name, weight in zip(("wq", "wk"), model.qk_weights(layer), strict=True):
            w = weight.detach().double()
            count = 4 if name == "wq" or kv_heads is None else kv_heads
            assert len(norms[name]) == 2 and len(norms[f"{name}_heads"][layer]) == count
            assert norms[name][layer] == pytest.approx(float(_reference(w)), rel=RTOL)
            heads = _reference(w.view(count, 64, 256)).tolist()
            assert norms[f"{name}_heads"][layer] == pytest.approx(heads, rel=RTOL)


def _log(path, *lines: str) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def test_intact_end_names_the_first_damaged_line(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s, "loss": 1.0}) for s in range(5)]
    _log(path, *good)
    assert intact_end(path) is None and intact_end(tmp_path / "absent.jsonl") is None
    for bad in ("{torn", '{"loss": 1}', '{"step": "3"}', "[1, 2]", json.dumps({"step": 1})):
        _log(path, *good[:3], bad, *good[3:])
        assert intact_end(path) == (3, 4), bad  # steps 0-2 intact: resume at or before 3
    _log(path, "{torn", *good)
    assert intact_end(path) == (0, 1)


def test_truncate_keeps_the_intact_records_before_the_step(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s}) for s in range(6)]
    _log(path, *good[:4], "{torn", *good[4:])
    truncate_jsonl(path, 3)
    assert path.read_text().splitlines() == good[:3]
    _log(path, *good[:4], "{torn", *good[4:])
    truncate_jsonl(path, 6)  # never keeps what lies past a damaged line
    assert path.read_text().splitlines() == good[:4]
