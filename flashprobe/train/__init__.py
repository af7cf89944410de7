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
from flashprobe.train.run import train_run
from flashprobe.train.run_state import RunSummary

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
