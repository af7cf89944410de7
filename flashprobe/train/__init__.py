"""GPT-2 training under attention ablations: configs, the loop, divergence rules, checkpoints."""

from flashprobe.train.config import (
    DivergenceConfig,
    LoopConfig,
    MetricsConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainConfig,
)
from flashprobe.train.divergence import Divergence, DivergenceMonitor
from flashprobe.train.run import RunSummary, train_run

__all__ = [
    "Divergence",
    "DivergenceConfig",
    "DivergenceMonitor",
    "LoopConfig",
    "MetricsConfig",
    "OptimizerConfig",
    "RunSummary",
    "ScheduleConfig",
    "TrainConfig",
    "train_run",
]
