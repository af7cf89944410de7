"""GPT shapes, tied weights, init, and which attention each layer and head runs."""

from __future__ import annotations

import math

import pytest
import torch

from flashprobe.errors import FlashprobeError
from flashprobe.model import GPT, ModelConfig
from flashprobe.model import attention as attention_module
from flashprobe.spec import PRESETS

TINY = {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 32, "vocab_size": 256}


def tiny(**overrides) -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig.from_dict({**TINY, **overrides}))


class RecordingAttention:
    """Stands in for flashprobe.attention: SDPA underneath, remembers what each call got."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, q, k, v, causal=True, spec="fa2", *, scale=None, backend="auto",
                 return_stats=False):  # fmt: skip
        self.calls.append(
            {"spec": spec, "heads": q.shape[1], "kv_heads": k.shape[1], "dtype": q.dtype,
             "q": q.detach().clone(), "k": k.detach().clone(),
             "autocast": torch.is_autocast_enabled(q.device.type), "backend": backend}
        )  # fmt: skip
        gqa = k.shape[1] != q.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=gqa
        )


@pytest.fixture
def recording(monkeypatch) -> RecordingAttention:
    fake = RecordingAttention()
    monkeypatch.setattr(attention_module, "flashprobe_attention", lambda: fake)
    return fake


def test_logits_shape_loss_and_tied_embeddings() -> None:
    model = tiny(attention="sdpa")
    idx = torch.randint(0, 256, (3, 32))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 32, 256)
    assert loss is not None and loss.shape == () and math.isfinite(loss.item())
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model(idx)[1] is None


def test_scaled_residual_init() -> None:
    model = GPT(ModelConfig.from_dict({**TINY, "n_layer": 8, "n_embd": 256, "attention": "sdpa"}))
    proj = model.transformer.h[0].mlp.c_proj.weight
    fc = model.transformer.h[0].mlp.c_fc.weight
    assert proj.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05)
    assert fc.std().item() == pytest.approx(0.02, rel=0.05)


def test_sequence_longer_than_block_size_is_an_error() -> None:
    with pytest.raises(FlashprobeError, match="block_size"):
        tiny(attention="sdpa")(torch.zeros(1, 33, dtype=torch.long))


def test_per_layer_spec_override_reaches_that_layer_only(recording) -> None:
    model = tiny(attention={"spec": "fa2"}, layers={1: {"spec": "paper-code"}})
    model(torch.randint(0, 256, (2, 32)))
    assert [c["spec"] for c in recording.calls] == [PRESETS["fa2"], PRESETS["paper-code"]]
    assert model.config.describe_attention() == [
        "layer 0: flashprobe[fa2]",
        "layer 1: flashprobe[paper-code]",
    ]


def test_flash_attention_in_one_layer_only(recording) -> None:
    """The paper's localisation: standard attention everywhere but layer 2 (index 1)."""
    model = tiny(attention="math", layers={1: {"impl": "flashprobe", "spec": "paper-code"}})
    model(torch.randint(0, 256, (2, 32)))
    assert len(recording.calls) == 1 and recording.calls[0]["spec"] == PRESETS["paper-code"]


def test_spec_override_fields_merge_onto_the_parent_spec() -> None:
    config = ModelConfig.from_dict(
        {**TINY, "attention": {"spec": "paper-code"},
         "layers": {1: {"spec": {"delta_source": "o_fp32"}}}}
    )  # fmt: skip
    spec = config.head_groups(1)[0].attention.spec
    assert spec == PRESETS["paper-code"].replace(delta_source="o_fp32")


def test_per_head_override_splits_heads_into_groups(recording) -> None:
    model = tiny(layers={0: {"heads": {2: {"spec": {"delta_source": "o_fp32"}}}}})
    x = torch.randint(0, 256, (2, 32))
    model(x)
    layer0 = [c for c in recording.calls[:2]]
    assert [c["heads"] for c in layer0] == [3, 1]
    assert layer0[1]["spec"].delta_source == "o_fp32"
    # The split group gets exactly head 2's queries.
    attn = model.transformer.h[0].attn
    h = model.transformer.wte(x) + model.transformer.wpe(torch.arange(32))
    q = attn.c_attn(model.transformer.h[0].ln_1(h))[..., :64].view(2, 32, 4, 16).transpose(1, 2)
    torch.testing.assert_close(layer0[1]["q"], q[:, 2:3].detach())
    torch.testing.assert_close(layer0[0]["q"], q[:, [0, 1, 3]].detach())


def test_head_groups_are_put_back_in_head_order() -> None:
    """sdpa and fp32 math agree in fp32, so any head mix-up would show in the logits."""
    idx = torch.randint(0, 256, (2, 32))
    reference, _ = tiny(attention="sdpa")(idx)
    mixed = tiny(
        attention="sdpa", layers={0: {"heads": {1: {"impl": "math"}, 3: {"impl": "math"}}}}
    )
    assert len(mixed.config.head_groups(0)) == 2
    torch.testing.assert_close(mixed(idx)[0], reference, rtol=1e-5, atol=1e-5)


def test_flashprobe_attention_sees_bf16_inputs_with_autocast_off(recording) -> None:
    model = tiny()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randint(0, 256, (2, 32)))
    assert all(c["dtype"] == torch.bfloat16 and not c["autocast"] for c in recording.calls)


def test_real_flashprobe_attention_trains_under_cpu_autocast() -> None:
    pytest.importorskip("flashprobe.api")
    model = tiny(attention={"spec": "paper-code"})
    idx = torch.randint(0, 256, (2, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(idx, idx)
    loss.backward()
    assert math.isfinite(loss.item())
    grad = model.transformer.h[0].attn.c_attn.weight.grad
    assert grad is not None and grad.dtype == torch.float32 and grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"n_embd": 62}, "multiple of model.n_head"),
        ({"n_kv_head": 3}, r"model.n_kv_head \(3\) must be a divisor of model.n_head \(4\)"),
        ({"n_kv_head": 0}, "model.n_kv_head"),
        ({"layers": {5: {"impl": "sdpa"}}}, "model.layers: layer 5 out of range 0..1"),
        ({"layers": {1: {"kernel": "fa2"}}}, "unknown key model.layers.1.kernel"),
        ({"layers": {1: {"impl": "xla"}}}, "model.layers.1.impl must be one of"),
        ({"layers": {0: {"heads": {9: {"impl": "sdpa"}}}}}, "head 9 out of range"),
        ({"attention": {"spec": {"beta": 0.5}}}, "model.attention.spec: beta"),
        ({"n_layer": "six"}, "model.n_layer must be an integer"),
        ({"n_layer": 4096}, "model.n_layer must be at most 1024, got 4096"),
        ({"n_head": 4096, "n_embd": 4096}, "model.n_head must be at most 1024, got 4096"),
        ({"n_embd": 2_000_000_000}, "model.n_embd must be at most 65536, got 2000000000"),
        ({"block_size": 1 << 30}, "model.block_size must be at most 1048576"),
        ({"vocab_size": 1 << 30}, r"model.vocab_size must be in \[2, 16777216\]"),
        ({"colour": 1}, "unknown key model.colour"),
    ],
)
def test_config_errors_are_one_line_and_name_the_key(overrides, message) -> None:
    with pytest.raises(FlashprobeError, match=message) as info:
        ModelConfig.from_dict({**TINY, **overrides})
    assert "\n" not in str(info.value)


# -- grouped-query attention ----------------------------------------------------------------------
def _repeated_kv_twin(gqa: GPT, **overrides) -> GPT:
    """A multi-head model whose K and V rows repeat the GQA model's: head h gets key/value head
    h // group's rows, written out head by head (not through flashprobe's expand_kv)."""
    cfg = gqa.config
    mha = tiny(**{**overrides, "n_kv_head": None})
    group, d, c = cfg.n_head // cfg.kv_heads, cfg.head_dim, cfg.n_embd
    with torch.no_grad():
        for name, param in gqa.named_parameters():
            target = mha.get_parameter(name)
            if not name.endswith("c_attn.weight"):
                target.copy_(param)
                continue
            q_rows, k_rows, v_rows = param.split((c, cfg.kv_heads * d, cfg.kv_heads * d))
            rows = [q_rows]
            for kv_rows in (k_rows, v_rows):
                rows += [
                    kv_rows[(h // group) * d : (h // group + 1) * d] for h in range(cfg.n_head)
                ]
            target.copy_(torch.cat(rows))
    return mha


@pytest.mark.parametrize("attention", ["sdpa", "math", {"spec": "fa2", "backend": "emulator"}])
def test_grouped_query_model_equals_multi_head_model_with_repeated_kv(attention) -> None:
    gqa = tiny(n_kv_head=2, attention=attention)
    d = gqa.config.head_dim
    assert gqa.transformer.h[0].attn.c_attn.weight.shape == (64 + 2 * 2 * d, 64)
    assert [w.shape for w in gqa.qk_weights(0)] == [(64, 64), (2 * d, 64)]
    mha = _repeated_kv_twin(gqa, attention=attention)
    assert gqa.num_params() < mha.num_params()
    idx = torch.randint(0, 256, (2, 32))
    torch.testing.assert_close(gqa(idx)[0], mha(idx)[0], rtol=1e-5, atol=1e-5)


def test_gqa_layer_passes_shared_kv_heads_to_a_single_head_group(recording) -> None:
    model = tiny(n_kv_head=2)
    model(torch.randint(0, 256, (2, 32)))
    assert [(c["heads"], c["kv_heads"]) for c in recording.calls] == [(4, 2), (4, 2)]


def test_split_gqa_layer_gives_each_group_its_kv_heads(recording) -> None:
    """Heads 2, 3 (all of key/value head 1) share it; head 1 alone gets its own copy of key/value
    head 0, and head 0 another."""
    model = tiny(
        n_kv_head=2,
        layers={0: {"heads": {1: {"spec": "paper-code"}, 2: {"spec": "sfa"}, 3: {"spec": "sfa"}}}},
    )
    idx = torch.randint(0, 256, (2, 32))
    model(idx)
    layer0 = recording.calls[:3]
    assert [(c["heads"], c["kv_heads"]) for c in layer0] == [(1, 1), (1, 1), (2, 1)]
    attn = model.transformer.h[0].attn
    h = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(32))
    k = attn.c_attn(model.transformer.h[0].ln_1(h))[..., 64:96].view(2, 32, 2, 16).transpose(1, 2)
    for call, kv_head in zip(layer0, (0, 0, 1), strict=True):
        torch.testing.assert_close(call["k"], k[:, kv_head : kv_head + 1].detach())


def test_split_gqa_layer_equals_the_unsplit_layer_forward_and_backward() -> None:
    """sdpa and fp32 math agree in fp32: splitting a GQA layer into groups, one of them only part
    of a shared head's queries, changes neither logits nor weight gradients."""
    idx = torch.randint(0, 256, (2, 32))
    reference = tiny(n_kv_head=2, attention="sdpa")
    split = tiny(n_kv_head=2, attention="sdpa", layers={0: {"heads": {1: {"impl": "math"}}}})
    assert len(split.config.head_groups(0)) == 2
    for model in (reference, split):
        model(idx, idx)[1].backward()  # type: ignore[union-attr]
    for (name, a), b in zip(reference.named_parameters(), split.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6, msg=name)


def check_gqa_model_on_triton_kernels(device: str, seq: int) -> None:
    """Logits match the repeated-K/V twin's; an instrumented step reports stats per query head
    and the key-shift leak per key/value head."""
    attention = {"spec": "fa2", "backend": "triton"}
    gqa = tiny(n_kv_head=2, attention=attention, block_size=seq)
    twin = _repeated_kv_twin(gqa, attention=attention, block_size=seq)
    gqa, twin = gqa.to(device), twin.to(device)
    idx = torch.randint(0, 256, (2, seq), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        torch.testing.assert_close(gqa(idx)[0], twin(idx)[0], rtol=2e-2, atol=2e-2)
        with gqa.instrument() as rec:
            gqa(idx, idx)[1].backward()  # type: ignore[union-attr]
    for layer in ("0", "1"):
        entry = rec.stats_dict()[layer]
        assert len(entry["max_logit"]) == 4 and len(entry["key_shift_leak"]) == 2
        assert all(x is not None and abs(x) < 1e-3 for x in entry["softmax_sum_bias"])
        assert all(x is not None and x < 2e-2 for x in entry["key_shift_leak"])
    assert all(p.grad is not None and p.grad.isfinite().all() for p in gqa.parameters())


def test_gqa_model_on_the_triton_kernels_in_the_interpreter() -> None:
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("CUDA machine: the gpu-marked twin runs the compiled kernels")
    check_gqa_model_on_triton_kernels("cpu", seq=24)  # 24: not a multiple of the key tiles


@pytest.mark.gpu
def test_gqa_model_on_the_triton_kernels() -> None:
    check_gqa_model_on_triton_kernels("cuda", seq=80)  # 80: not a multiple of the tiles
