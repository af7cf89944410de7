"""nanoGPT-style GPT-2: pre-LayerNorm blocks, GELU MLP, tied input/output embeddings.

Every layer's attention is chosen by `ModelConfig` (flashprobe kernel with a KernelSpec, torch
SDPA, or fp32 math), per layer and per head; see `flashprobe.model.config`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from flashprobe.errors import FlashprobeError
from flashprobe.model.attention import CausalSelfAttention
from flashprobe.model.config import ModelConfig
from flashprobe.model.instrument import AttentionRecorder

INIT_STD = 0.02


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(
            config.n_embd,
            config.n_head,
            config.head_groups(layer),
            layer,
            config.bias,
            config.kv_heads,
        )
        self.attn_dropout = nn.Dropout(config.dropout)  # on the residual branch, as nanoGPT
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn_dropout(self.attn(self.ln_1(x)))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2. `forward(idx, targets)` returns (logits, loss); loss is None without targets."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.vocab_size is None:
            raise FlashprobeError("model.vocab_size is not set (the dataset normally sets it)")
        self.config = config
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(config.vocab_size, config.n_embd),
                "wpe": nn.Embedding(config.block_size, config.n_embd),
                "drop": nn.Dropout(config.dropout),
                "h": nn.ModuleList(Block(config, i) for i in range(config.n_layer)),
                "ln_f": nn.LayerNorm(config.n_embd, bias=config.bias),
            }
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied embeddings
        self.apply(_init_weights)
        # GPT-2's scaled init: residual projections shrink with depth.
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=INIT_STD / math.sqrt(2 * config.n_layer))

    @property
    def attention_layers(self) -> list[CausalSelfAttention]:
        return [block.attn for block in self.transformer.h]

    def num_params(self, non_embedding: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, t = idx.shape
        if t > self.config.block_size:
            raise FlashprobeError(
                f"sequence length {t} exceeds block_size {self.config.block_size}"
            )
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        # The loss is always reduced in fp32, whatever dtype autocast gave the logits.
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @contextlib.contextmanager
    def instrument(
        self, *, stats: bool = True, capture_layers: Iterable[int] = ()
    ) -> Iterator[AttentionRecorder]:
        """Record attention stats (and capture tensors of some layers) for forwards inside.

        Run backward inside the context too if you want dO in the captures.
        """
        capture = tuple(capture_layers)
        for layer in capture:
            if not 0 <= layer < self.config.n_layer:
                raise FlashprobeError(
                    f"capture layer {layer} out of range 0..{self.config.n_layer - 1}"
                )
        recorder = AttentionRecorder(collect_stats=stats, capture_layers=capture)
        for attn in self.attention_layers:
            attn.recorder = recorder
        try:
            yield recorder
        finally:
            for attn in self.attention_layers:
                attn.recorder = None

    def qk_weights(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """W_Q (n_embd × n_embd) and W_K (key/value heads · head_dim × n_embd) of a layer,
        output rows grouped by head."""
        attn = self.transformer.h[layer].attn
        c = attn.n_embd
        return attn.c_attn.weight[:c], attn.c_attn.weight[c : c + attn.kv_dim]


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
