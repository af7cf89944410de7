"""Token streams and the deterministic, replayable batch order."""

from flashprobe.data.config import DataConfig
from flashprobe.data.dataset import TokenDataset, open_dataset
from flashprobe.data.sampler import BatchSampler, batch_at, eval_offsets, rank_share
from flashprobe.data.stdlib_corpus import stdlib_corpus, stdlib_files

__all__ = [
    "BatchSampler",
    "DataConfig",
    "TokenDataset",
    "batch_at",
    "eval_offsets",
    "open_dataset",
    "rank_share",
    "stdlib_corpus",
    "stdlib_files",
]
