"""GPT-2 whose attention is a flashprobe kernel, SDPA or fp32 math, per layer and per head."""

from flashprobe.model.config import AttentionConfig, HeadGroup, ModelConfig
from flashprobe.model.gpt import GPT
from flashprobe.model.instrument import AttentionRecorder, LayerStats

__all__ = ["GPT", "AttentionConfig", "AttentionRecorder", "HeadGroup", "LayerStats", "ModelConfig"]
