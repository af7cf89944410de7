"""FlashAttention peers through fake `flash_attn` / `flash_attn_interface` modules (conftest)."""

from __future__ import annotations

import math
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from flashprobe.probes import benchmark as bench
from flashprobe.probes import flash_attn_peers as peers


def _peer(generation: int) -> bench.Implementation:
    return bench.Implementation(peers.PEERS[generation].name, flash_attn=generation)


@pytest.mark.parametrize("generation", [2, 3])
@pytest.mark.parametrize("causal", [True, False])
def test_a_peer_computes_attention_on_its_own_layout(fake_flash_attn, generation, causal) -> None:
    """Inputs made as [B, H, N, D], copied to [B, N, H, D], and the output turned back agree
    with SDPA on the original inputs; a transpose left out or doubled would not (N != H)."""
    shape = bench.BenchShape(2, 4, 24, 16, causal, "fp16", kv_heads=2)
    q, k, v, do = bench.make_inputs(shape, seed=1, device="cpu")
    q, k, v = (t.float() for t in (q, k, v))
    qn, kn, vn, _ = bench.to_layout((q, k, v, do), "bnhd")
    assert qn.shape == (2, 24, 4, 16) and kn.shape == (2, 24, 2, 16) and qn.is_contiguous()
    out = bench.attend_fn(_peer(generation), shape)(qn, kn, vn)
    assert isinstance(out, torch.Tensor)  # FA3's (out, lse) unwrapped
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out.transpose(1, 2), expected, rtol=1e-5, atol=1e-6)
    assert fake_flash_attn.calls == [(generation, (2, 24, 4, 16), True, 1 / math.sqrt(16), causal)]


@pytest.mark.parametrize("returns_lse", [True, False])
def test_fa3_output_with_or_without_the_lse(fake_flash_attn, returns_lse) -> None:
    fake_flash_attn.fa3_returns_lse = returns_lse
    shape = bench.BenchShape(1, 2, 8, 8, False, kv_heads=None)
    q, k, v = (torch.randn(1, 8, 2, 8) for _ in range(3))
    out = bench.attend_fn(_peer(3), shape)(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape


@pytest.mark.parametrize("generation", [2, 3])
def test_a_peer_not_installed_says_so_in_one_line(monkeypatch, generation) -> None:
    monkeypatch.setitem(sys.modules, peers.PEERS[generation].module, None)
    shape = bench.BenchShape(1, 2, 8, 8, False)
    with pytest.raises(peers.PeerUnavailable, match=r"^not installed$"):
        bench.attend_fn(_peer(generation), shape)
    assert peers.version(generation) is None


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (  # built against another torch
            "raise ImportError('undefined symbol: _ZN3c104cuda9SetDeviceEi\\nmore detail')",
            "undefined symbol: _ZN3c104cuda9SetDeviceEi",
        ),
        (  # the Python interface without its compiled extension
            "import flash_attn_3._C",
            "No module named 'flash_attn_3._C'",
        ),
    ],
)
def test_a_broken_install_is_unsupported_not_a_traceback(
    monkeypatch, tmp_path: Path, source: str, reason: str
) -> None:
    (tmp_path / "flash_attn_interface.py").write_text(source + "\n")
    (tmp_path / "flash_attn_3").mkdir()
    (tmp_path / "flash_attn_3" / "__init__.py").write_text("")  # its package, no extension
    for module in ("flash_attn_interface", "flash_attn_3", "flash_attn_3._C"):
        # set, then delete: whatever this import adds is gone again after the test
        monkeypatch.setitem(sys.modules, module, None)
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(peers.PeerUnavailable) as info:
        peers.load(3)
    assert str(info.value) == f"unsupported: cannot import flash_attn_interface: {reason}"


def test_versions_come_from_the_module_or_its_distribution(fake_flash_attn, monkeypatch) -> None:
    assert peers.version(2) == "2.7.4"
    installed = {"flash_attn_3": "3.0.0b1"}

    def version(dist: str) -> str:
        if dist not in installed:
            raise metadata.PackageNotFoundError(dist)
        return installed[dist]

    monkeypatch.setattr(peers.metadata, "version", version)
    assert peers.version(3) == "3.0.0b1"
    installed.clear()
    assert peers.version(3) == "unknown"  # importable, but from a source tree without metadata


def test_known_limits_are_refused_before_calling_the_library() -> None:
    d128 = bench.BenchShape(1, 2, 128, 128, True)
    d512 = bench.BenchShape(1, 2, 128, 512, True)
    assert peers.unsupported(3, d128, (9, 0)) is None
    assert peers.unsupported(3, d128, (8, 0)) == (
        "FlashAttention-3 needs an sm_90 (Hopper) GPU, this is sm_80"
    )
    assert peers.unsupported(3, d128, (10, 0)) is not None
    assert peers.unsupported(2, d128, (8, 6)) is None
    assert peers.unsupported(2, d128, (9, 0)) is None
    assert (
        peers.unsupported(2, d128, (7, 5)) == "FlashAttention-2 needs sm_80 or newer, this is sm_75"
    )
    assert peers.unsupported(2, d512, (9, 0)) == "head dim 512 > 256"
    assert peers.unsupported(3, d512, None) == "head dim 512 > 256"


def test_an_unsupported_head_dim_is_refused_in_one_line(fake_flash_attn) -> None:
    shape = bench.BenchShape(1, 2, 8, 512, False)
    with pytest.raises(peers.PeerUnavailable, match=r"^unsupported: head dim 512 > 256$"):
        bench.attend_fn(_peer(2), shape)
    assert fake_flash_attn.calls == []  # refused before any call
