"""flashprobe.sdpa (F.scaled_dot_product_attention's signature) and patch_sdpa (an existing
model's SDPA calls under a KernelSpec): the project's GPT, and a Hugging Face GPT-2 if installed."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import flashprobe
from flashprobe.errors import FlashprobeError
from flashprobe.model import GPT, ModelConfig

TINY = {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 32, "vocab_size": 256}
TORCH_SDPA = F.scaled_dot_product_attention


def qkv(heads: int = 4, kv_heads: int = 4, n: int = 48, d: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, n, d, generator=g)
    k, v = (torch.randn(2, kv_heads, n, d, generator=g) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_is_flashprobe_attention_with_sdpa_arguments(causal: bool) -> None:
    q, k, v = (t.bfloat16() for t in qkv())
    got = flashprobe.sdpa(q, k, v, is_causal=causal, scale=0.3, spec="paper-code")
    want = flashprobe.attention(q, k, v, causal=causal, scale=0.3, spec="paper-code")
    assert torch.equal(got, want)
    # fp32 spec on fp32 inputs: the same attention as torch's SDPA, to fp32 rounding.
    q, k, v = qkv()
    close = flashprobe.sdpa(q, k, v, is_causal=causal, spec="fp32")
    torch.testing.assert_close(close, TORCH_SDPA(q, k, v, is_causal=causal), atol=2e-6, rtol=0)


def test_sdpa_grouped_query_and_3d_inputs() -> None:
    q, k, v = qkv(heads=4, kv_heads=2)
    got = flashprobe.sdpa(q, k, v, is_causal=True, enable_gqa=True, spec="fp32")
    want = TORCH_SDPA(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=0)
    q3, k3, v3 = (t[:, 0] for t in qkv())
    got3 = flashprobe.sdpa(q3, k3, v3, is_causal=True, spec="fp32")
    assert got3.shape == q3.shape
    torch.testing.assert_close(got3, TORCH_SDPA(q3, k3, v3, is_causal=True), atol=2e-6, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"attn_mask": torch.ones(48, 48, dtype=torch.bool)}, "attn_mask is not supported"),
        ({"dropout_p": 0.1}, "dropout_p=0.1 is not supported"),
        ({"spec": "nope"}, "unknown preset"),
        ({"is_causal": "False"}, "is_causal must be True or False, got 'False'"),  # truthy
        ({"enable_gqa": 1}, "enable_gqa must be True or False, got 1"),
    ],
)
def test_what_sdpa_does_not_support_is_a_one_line_error(kwargs, needle: str) -> None:
    q, k, v = qkv()
    with pytest.raises(FlashprobeError, match=needle) as info:
        flashprobe.sdpa(q, k, v, **kwargs)
    assert "\n" not in str(info.value)


def test_sdpa_takes_a_0d_tensor_scale_as_torch_does() -> None:
    q, k, v = qkv()
    got = flashprobe.sdpa(q, k, v, scale=torch.tensor(0.3), spec="fp32")
    torch.testing.assert_close(got, flashprobe.sdpa(q, k, v, scale=0.3, spec="fp32"))


def test_autocast_casts_what_torch_casts_and_leaves_fp64() -> None:
    """As autocast casts SDPA's inputs: fp32 to the autocast dtype, fp64 kept."""
    q, k, v = qkv()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = flashprobe.sdpa(q, k, v, spec="fp32")
        double = flashprobe.sdpa(q.double(), k.double(), v.double(), spec="fp32")
        assert low.dtype == TORCH_SDPA(q, k, v).dtype == torch.bfloat16
        assert double.dtype == TORCH_SDPA(q.double(), k.double(), v.double()).dtype
    assert double.dtype == torch.float64


def test_sdpa_shape_errors() -> None:
    q, k, v = qkv(heads=4, kv_heads=2)
    with pytest.raises(FlashprobeError, match="enable_gqa=True"):
        flashprobe.sdpa(q, k, v)
    q, k, v = qkv()
    with pytest.raises(FlashprobeError, match="value head size"):
        flashprobe.sdpa(q, k, v[..., :8])
    with pytest.raises(FlashprobeError, match="4-D"):
        flashprobe.sdpa(q[None], k[None], v[None])
    # not an AttributeError on .dim() (a model passing a list or a numpy array)
    with pytest.raises(FlashprobeError, match=r"key must be a torch\.Tensor, got list"):
        flashprobe.sdpa(q, k.tolist(), v)
    with pytest.raises(FlashprobeError, match=r"query must be a torch\.Tensor, got ndarray"):
        flashprobe.sdpa(q.numpy(), k, v)


def test_patch_sdpa_restores_on_exit_on_error_and_nests() -> None:
    q, k, v = (t.bfloat16() for t in qkv())
    with flashprobe.patch_sdpa(spec="paper-code") as outer:
        assert outer == flashprobe.make_spec("paper-code")
        assert torch.equal(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                           flashprobe.attention(q, k, v, spec="paper-code"))  # fmt: skip
        with flashprobe.patch_sdpa(spec="fa2"):
            inner = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            assert torch.equal(inner, flashprobe.attention(q, k, v, spec="fa2"))
        again = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert torch.equal(again, flashprobe.attention(q, k, v, spec="paper-code"))
    assert F.scaled_dot_product_attention is TORCH_SDPA
    with pytest.raises(RuntimeError, match="boom"), flashprobe.patch_sdpa(spec="sfa"):
        raise RuntimeError("boom")
    assert F.scaled_dot_product_attention is TORCH_SDPA
    with pytest.raises(FlashprobeError, match="unknown preset"), flashprobe.patch_sdpa("x"):
        pass  # pragma: no cover - the bad spec fails on entry
    assert F.scaled_dot_product_attention is TORCH_SDPA


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("spec", ["paper-code", "fa2"])
def test_the_projects_gpt_under_patch_sdpa_equals_its_flashprobe_path(autocast, spec) -> None:
    """model.attention impl sdpa, patched, gives the logits and gradients of impl flashprobe
    with the same spec and weights (the emulator on CPU)."""
    torch.manual_seed(0)
    ours = GPT(ModelConfig.from_dict({**TINY, "attention": {"spec": spec, "backend": "emulator"}}))
    plain = GPT(ModelConfig.from_dict({**TINY, "attention": "sdpa"}))
    plain.load_state_dict(ours.state_dict())
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want, want_loss = ours(idx, idx)
        with flashprobe.patch_sdpa(spec=spec, backend="emulator"):
            got, got_loss = plain(idx, idx)
        unpatched, _ = plain(idx, idx)
    assert torch.equal(got, want)
    assert not torch.equal(unpatched, want)  # torch's own SDPA rounds differently
    want_loss.backward()
    got_loss.backward()
    for (name, a), b in zip(ours.named_parameters(), plain.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad), name


def test_a_hugging_face_gpt2_runs_under_patch_sdpa(monkeypatch) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4, attn_pdrop=0.0,
        resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    idx = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(1))
    calls: list[tuple[int, ...]] = []
    original = flashprobe.attention

    def counting(q, *args, **kwargs):
        calls.append(tuple(q.shape))
        return original(q, *args, **kwargs)

    monkeypatch.setattr("flashprobe.api.attention", counting)
    with torch.no_grad():
        want = model(idx).logits
        with flashprobe.patch_sdpa(spec="fp32", backend="emulator"):
            exact = model(idx).logits
        with flashprobe.patch_sdpa(spec="paper-code", backend="emulator"):
            paper = model(idx).logits
    assert calls == [(2, 4, 40, 16)] * (2 * config.n_layer)  # every layer, both patched runs
    torch.testing.assert_close(exact, want, atol=1e-4, rtol=0)  # fp32 spec: HF's own logits
    assert (paper - want).abs().max() > 10 * (exact - want).abs().max()  # the bf16 kernel shows


def test_patch_sdpa_blocks_exited_out_of_order_leave_no_patch_behind() -> None:
    q, k, v = (t.bfloat16() for t in qkv())
    outer, inner = flashprobe.patch_sdpa(spec="paper-code"), flashprobe.patch_sdpa(spec="fa2")
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # the outer block first: the inner one stays in force
    still_inner = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(still_inner, flashprobe.attention(q, k, v, spec="fa2"))
    inner.__exit__(None, None, None)
    assert F.scaled_dot_product_attention is TORCH_SDPA


def test_a_closed_patch_reached_through_a_foreign_patch_passes_through() -> None:
    q, k, v = (t.bfloat16() for t in qkv())
    calls: list[str] = []
    with flashprobe.patch_sdpa(spec="paper-code"):
        below = F.scaled_dot_product_attention

        def foreign(*args, **kwargs):  # another library's patch, made inside the block
            calls.append("foreign")
            return below(*args, **kwargs)

        F.scaled_dot_product_attention = foreign
    assert F.scaled_dot_product_attention is foreign  # not ours to undo
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    F.scaled_dot_product_attention = TORCH_SDPA
    assert calls == ["foreign"]
    assert torch.equal(out, TORCH_SDPA(q, k, v, is_causal=True))  # the closed block's spec is gone
