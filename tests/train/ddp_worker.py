"""One side of test_distributed.py's comparison: alone, or one rank under torchrun.

    python tests/train/ddp_worker.py CONFIG.json OUT
    python -m torch.distributed.run --standalone --nproc_per_node N tests/train/ddp_worker.py ...

Into OUT (rank 0 writes):
  init.safetensors   the initial weights
  grad0.safetensors  the gradient of step 0's global batch at the initial weights
  run/               train_run of the config (metrics.jsonl: every step's loss and grad norm)
  final.safetensors  the final weights (run/'s last checkpoint)
  gradT.safetensors  the gradient of step T's batch (T = train.steps) at the final weights
  half0.safetensors  (alone only) the gradient of the first half of step 0's batch at the
                     initial weights: rank 0's share of two, as if the all-reduce were missing

A gradient is the one the training loop computes (`_Run._forward_backward`: DDP, gradient
accumulation, bf16 autocast), read before the clip and the update; train_run itself zeroes it
after each step, so it is recomputed here. Metadata "loss" holds the loss of that batch.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from flashprobe.data.sampler import BatchSampler, rank_share
from flashprobe.train import TrainConfig, train_run
from flashprobe.train.checkpoint import load_weights, read_checkpoint
from flashprobe.train.distributed import Distributed, setup_distributed
from flashprobe.train.run import _Run


def gradient(
    config: TrainConfig, dist: Distributed, step: int, weights: Path | None, share: int = 1
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], float]:
    """(weights, gradient, loss) of step `step`'s global batch at `weights` (None: initial);
    share > 1 (alone only): of the batch's first 1/share instead."""
    if share > 1:
        train = dataclasses.replace(config.train, batch_size=config.train.batch_size // share)
        config = config.replace(train=train)
    run = _Run(config, Path("unused"), dist, None)  # writes nothing until execute()
    if weights is not None:
        load_weights(read_checkpoint(weights), run.model)
    offsets = BatchSampler(
        len(run.dataset.train), run.model.config.block_size, config.train.batch_size * share,
        config.train.seed,
    ).offsets(step)[: config.train.batch_size]  # fmt: skip
    loss = run._forward_backward(rank_share(offsets, dist.rank, dist.world_size))
    params = dict(run.model.named_parameters())
    grads = {name: p.grad.detach().cpu().clone() for name, p in params.items()}
    state = {name: p.detach().cpu().clone() for name, p in params.items()}
    return state, grads, loss


def main(config_path: str, out: str) -> None:
    config = TrainConfig.from_dict(json.loads(Path(config_path).read_text()))
    out_dir = Path(out)
    dist = setup_distributed(config.train.device)
    try:
        initial, grad0, loss0 = gradient(config, dist, 0, None)
        train_run(config, out_dir / "run")  # reuses this process group
        final, grad_t, loss_t = gradient(config, dist, config.train.steps, out_dir / "run")
        if dist.world_size == 1:
            _, half0, loss_half = gradient(config, dist, 0, None, share=2)
            save_file(half0, str(out_dir / "half0.safetensors"), {"loss": repr(loss_half)})
        if dist.is_main:
            save_file(initial, str(out_dir / "init.safetensors"))
            save_file(final, str(out_dir / "final.safetensors"))
            save_file(grad0, str(out_dir / "grad0.safetensors"), {"loss": repr(loss0)})
            save_file(grad_t, str(out_dir / "gradT.safetensors"), {"loss": repr(loss_t)})
    finally:
        dist.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
