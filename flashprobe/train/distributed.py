"""One process per GPU under torchrun (WORLD_SIZE > 1), otherwise a single process.

Kept deliberately small: DistributedDataParallel for gradients, all-reduce for the logged
loss, rank 0 writes every file. CI checks it with two CPU ranks over gloo against one process
(tests/train/test_distributed.py); its NCCL variant needs a host with several GPUs.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from flashprobe.errors import FlashprobeError

#: NVLink multicast (NVLS) off in NCCL, PyTorch's symmetric memory and NVSHMEM. Shared GPU hosts
#: (the lent multi-H200 machines among them) require it: a program that creates a multicast
#: object can take the host's GPUs out of service. DDP's gradient all-reduce does not need it.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass(frozen=True)
class Distributed:
    rank: int
    world_size: int
    device: torch.device
    initialised_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean over ranks of a scalar tensor (the value itself on one rank)."""
        if self.world_size == 1:
            return value
        value = value.detach().clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value / self.world_size

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        if self.initialised_here:
            # DDP reducers left in reference cycles keep gloo's worker threads (and tensors they
            # hold) alive past destroy_process_group, which can abort the process at exit:
            # collect them first, and let every rank get here before any tears down.
            gc.collect()
            dist.barrier()
            dist.destroy_process_group()


def setup_distributed(device: str) -> Distributed:
    """Join the torchrun process group when WORLD_SIZE > 1; pick the device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed(0, 1, _single_device(device))
    if device == "cpu":
        backend, target = "gloo", torch.device("cpu")
    else:
        for name, value in MULTICAST_OFF.items():  # read when NCCL starts: set before that
            os.environ.setdefault(name, value)
        if not torch.cuda.is_available():
            raise FlashprobeError("WORLD_SIZE > 1 needs CUDA GPUs (or train.device: cpu)")
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        backend, target = "nccl", torch.device("cuda", local_rank)
    created = not dist.is_initialized()
    if created:
        dist.init_process_group(backend=backend)
    return Distributed(dist.get_rank(), dist.get_world_size(), target, created)


def _single_device(device: str) -> torch.device:
    if device == "cuda" and not torch.cuda.is_available():
        raise FlashprobeError("train.device is cuda but no CUDA GPU is available")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
