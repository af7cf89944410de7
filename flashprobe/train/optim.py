"""Build the optimizer a config names, with weight decay on 2-D weights only."""

from __future__ import annotations

import torch

from flashprobe.model.gpt import GPT
from flashprobe.train.config import OptimizerConfig


def build_optimizer(model: GPT, config: OptimizerConfig) -> torch.optim.Optimizer:
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    matrices = [p for p in params.values() if p.dim() >= 2]
    vectors = [p for p in params.values() if p.dim() < 2]
    decay_split = [
        {"params": matrices, "weight_decay": config.weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    if config.name == "adamw":
        return torch.optim.AdamW(decay_split, lr=config.lr, betas=config.betas, eps=config.eps)
    if config.name == "sgd":  # heavy-ball momentum = betas[0], AdamW's first-moment decay
        return torch.optim.SGD(decay_split, lr=config.lr, momentum=config.betas[0])
    from flashprobe.train.muon import MuonWithAdamW

    # Muon for the blocks' matrices; embeddings (tied with the LM head) stay on AdamW.
    hidden = [p for name, p in params.items() if p.dim() == 2 and name.startswith("transformer.h.")]
    hidden_ids = {id(p) for p in hidden}
    embeddings = [p for p in matrices if id(p) not in hidden_ids]
    groups = [
        {"params": hidden, "use_muon": True, "weight_decay": config.weight_decay},
        {"params": embeddings, "use_muon": False, "weight_decay": config.weight_decay},
        {"params": vectors, "use_muon": False, "weight_decay": 0.0},
    ]
    return MuonWithAdamW(
        [g for g in groups if g["params"]],
        lr=config.lr,
        betas=config.betas,
        eps=config.eps,
        weight_decay=config.weight_decay,
        momentum=config.muon_momentum,
        nesterov=config.muon_nesterov,
        ns_steps=config.muon_ns_steps,
    )
