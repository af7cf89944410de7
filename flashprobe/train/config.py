"""Training configuration: frozen dataclasses a YAML layer builds with `TrainConfig.from_dict`.

Every section rejects unknown keys and bad values with a one-line `FlashprobeError` naming the
key (e.g. ``optimizer.lr must be a number, got 'fast'``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from flashprobe.config_tools import build_config, check_fields, require
from flashprobe.data.config import DataConfig
from flashprobe.errors import FlashprobeError
from flashprobe.model.config import ModelConfig

#: Sequences a step and CPU threads a run may ask for: far beyond any real run, and refused at
#: once where a typo would hang in allocation (a batch of 10⁸) or crash torch (10⁵ threads).
MAX_BATCH_SIZE = 1 << 20
MAX_CPU_THREADS = 1024


class _Section:
    """from_dict / to_dict for a flat config section."""

    SECTION: ClassVar[str]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Any:
        return build_config(cls, data, cls.SECTION)

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION)
        self._check()

    def _check(self) -> None:
        pass

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)  # type: ignore[call-overload]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(_Section):
    """AdamW, or Muon for 2-D hidden weights with AdamW for the rest (the paper's setup), or SGD
    with momentum betas[0] (a control for what AdamW's per-weight scaling does).

    Weight decay applies to 2-D weights only (matrices and embeddings), never to biases or
    LayerNorm gains. Muon's update is RMS-matched to AdamW (scaled by 0.2·sqrt(max(rows, cols)),
    Moonlight), so the same lr and weight_decay serve both parts.
    """

    name: Literal["adamw", "muon", "sgd"] = "adamw"
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.0
    muon_momentum: float = 0.95
    muon_nesterov: bool = True
    muon_ns_steps: int = 5

    SECTION: ClassVar[str] = "optimizer"

    def _check(self) -> None:
        require(self.lr > 0, f"optimizer.lr must be > 0, got {self.lr}")
        for beta in self.betas:
            require(0.0 <= beta < 1.0, f"optimizer.betas must be in [0, 1), got {list(self.betas)}")
        require(self.eps > 0, f"optimizer.eps must be > 0, got {self.eps}")
        require(self.weight_decay >= 0, "optimizer.weight_decay must be >= 0")
        require(0.0 <= self.muon_momentum < 1.0, "optimizer.muon_momentum must be in [0, 1)")
        require(self.muon_ns_steps >= 1, "optimizer.muon_ns_steps must be >= 1")


@dataclasses.dataclass(frozen=True)
class ScheduleConfig(_Section):
    """Linear warmup from lr/warmup to lr, then cosine decay to min_lr over decay_steps
    (default: to the last step), then min_lr. kind 'constant' holds lr after warmup."""

    kind: Literal["cosine", "constant"] = "cosine"
    warmup_steps: int = 200
    decay_steps: int | None = None
    min_lr: float = 1e-5

    SECTION: ClassVar[str] = "schedule"

    def _check(self) -> None:
        require(self.warmup_steps >= 0, "schedule.warmup_steps must be >= 0")
        require(
            self.decay_steps is None or self.decay_steps >= 1, "schedule.decay_steps must be >= 1"
        )
        require(self.min_lr >= 0, f"schedule.min_lr must be >= 0, got {self.min_lr}")


@dataclasses.dataclass(frozen=True)
class LoopConfig(_Section):
    """The training loop. batch_size counts sequences per optimizer step over all ranks;
    micro_batch_size (per rank and forward; default: all of the rank's share) sets gradient
    accumulation = batch_size / (micro_batch_size · world_size)."""

    steps: int = 2000
    batch_size: int = 16
    micro_batch_size: int | None = None
    seed: int = 0
    precision: Literal["bf16", "fp32"] = "bf16"
    grad_clip: float | None = 1.0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: TF32 matmuls on CUDA (the paper's code turns them off).
    allow_tf32: bool = False
    #: PyTorch's deterministic algorithms (torch.use_deterministic_algorithms, warning instead
    #: of failing where an op has none), so one config and seed give the same numbers on one
    #: machine; the Triton kernels are deterministic either way.
    deterministic: bool = True
    #: PyTorch's CPU threads (torch.set_num_threads) while the run trains. CPU matmuls split
    #: their sums by thread, so the count changes the numbers (a grad norm in the last bits,
    #: then a divergence step): it is part of the config, hence of a cell's key, and a resume
    #: with another count is refused. 1 is fastest for small CPU models, and on a shared or
    #: busy machine; raise it for a large model trained on the CPU.
    cpu_threads: int = 1
    #: torch.compile the model (nanoGPT's default): fewer kernel launches and far less host
    #: work per step; flashprobe's Triton attention stays one op each way (kernels.ops).
    #: Steps that record attention stats or capture tensors run eagerly (no recompiles).
    compile: bool = False
    #: torch.compile's mode: "reduce-overhead" also replays each step as CUDA graphs.
    compile_mode: Literal["default", "reduce-overhead", "max-autotune-no-cudagraphs"] = "default"
    #: Save a checkpoint every this many steps (0: only the final one, if checkpoint_final).
    checkpoint_every: int = 0
    checkpoint_final: bool = True
    #: Keep only the newest N checkpoints (None: keep all; baselines are branched from them).
    keep_checkpoints: int | None = None

    SECTION: ClassVar[str] = "train"

    def _check(self) -> None:
        require(self.steps >= 1, "train.steps must be >= 1")
        require(
            1 <= self.batch_size <= MAX_BATCH_SIZE,
            f"train.batch_size must be in [1, {MAX_BATCH_SIZE}], got {self.batch_size}",
        )
        require(
            self.micro_batch_size is None or self.micro_batch_size >= 1,
            "train.micro_batch_size must be >= 1",
        )
        require(0 <= self.seed < 2**64, f"train.seed must be in [0, 2**64), got {self.seed}")
        require(
            1 <= self.cpu_threads <= MAX_CPU_THREADS,
            f"train.cpu_threads must be in [1, {MAX_CPU_THREADS}], got {self.cpu_threads}",
        )
        require(self.grad_clip is None or self.grad_clip > 0, "train.grad_clip must be > 0")
        require(self.checkpoint_every >= 0, "train.checkpoint_every must be >= 0")
        require(
            self.keep_checkpoints is None or self.keep_checkpoints >= 1,
            "train.keep_checkpoints must be >= 1",
        )

    def accumulation(self, world_size: int) -> tuple[int, int]:
        """(micro_batch_size, accumulation steps) for `world_size` ranks."""
        if self.batch_size % world_size:
            raise FlashprobeError(
                f"train.batch_size ({self.batch_size}) must be a multiple of the world size "
                f"({world_size})"
            )
        per_rank = self.batch_size // world_size
        micro = self.micro_batch_size or per_rank
        if per_rank % micro:
            raise FlashprobeError(
                f"train.micro_batch_size ({micro}) must divide the per-rank batch ({per_rank})"
            )
        return micro, per_rank // micro


@dataclasses.dataclass(frozen=True)
class DivergenceConfig(_Section):
    """When a run counts as diverged (see flashprobe.train.divergence). Rules other than
    `nonfinite` ignore steps before `min_step` and must fire on `patience` consecutive steps."""

    nonfinite: bool = True
    #: loss > rise_factor × running minimum.
    rise_factor: float | None = None
    #: loss > running minimum + rise_margin (the findings' "min + 1" rule).
    rise_margin: float | None = None
    #: The running minimum looks back this many steps (None: the whole run).
    rise_window: int | None = None
    #: loss > mean + spike_sigma · std of the previous spike_window losses (OLMo: 6σ over 128).
    spike_sigma: float | None = None
    spike_window: int = 128
    patience: int = 1
    min_step: int = 0
    #: Stop the run at the first divergence (otherwise record it and keep training).
    stop: bool = True

    SECTION: ClassVar[str] = "divergence"

    def _check(self) -> None:
        require(
            self.rise_factor is None or self.rise_factor > 1.0,
            f"divergence.rise_factor must be > 1, got {self.rise_factor}",
        )
        require(
            self.rise_margin is None or self.rise_margin > 0, "divergence.rise_margin must be > 0"
        )
        require(
            self.rise_window is None or self.rise_window >= 1, "divergence.rise_window must be >= 1"
        )
        require(
            self.spike_sigma is None or self.spike_sigma > 0, "divergence.spike_sigma must be > 0"
        )
        require(self.spike_window >= 2, "divergence.spike_window must be >= 2")
        require(self.patience >= 1, "divergence.patience must be >= 1")
        require(self.min_step >= 0, "divergence.min_step must be >= 0")


@dataclasses.dataclass(frozen=True)
class MetricsConfig(_Section):
    """What goes into metrics.jsonl and how often (0 turns a cadence off).

    Per step: loss, grad_norm, lr, tokens/s. Every eval_every steps (and at the end): val_loss
    over eval_batches micro-batches. Every spectral_every steps: spectral norms of W_Q and W_K
    per layer and per head. Every attention_stats_every steps: per-layer, per-head max attention
    logit, tie events and P̄=1 counts of that step's forwards. At capture_steps: Q, K, V, O, LSE
    and dO of capture_layers (first micro-batch) to captures/step_<t>.safetensors.
    """

    log_every: int = 1
    eval_every: int = 250
    eval_batches: int = 20
    spectral_every: int = 100
    attention_stats_every: int = 100
    capture_layers: tuple[int, ...] = ()
    capture_steps: tuple[int, ...] = ()

    SECTION: ClassVar[str] = "metrics"

    def _check(self) -> None:
        for name in ("log_every", "eval_every", "spectral_every", "attention_stats_every"):
            require(getattr(self, name) >= 0, f"metrics.{name} must be >= 0")
        require(self.eval_batches >= 1, "metrics.eval_batches must be >= 1")
        require(all(s >= 0 for s in self.capture_steps), "metrics.capture_steps must be >= 0")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run: model, data, optimizer, schedule, loop, divergence rules, metrics."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    train: LoopConfig = dataclasses.field(default_factory=LoopConfig)
    divergence: DivergenceConfig = dataclasses.field(default_factory=DivergenceConfig)
    metrics: MetricsConfig = dataclasses.field(default_factory=MetricsConfig)

    SECTIONS: ClassVar[dict[str, type]] = {
        "model": ModelConfig,
        "data": DataConfig,
        "optimizer": OptimizerConfig,
        "schedule": ScheduleConfig,
        "train": LoopConfig,
        "divergence": DivergenceConfig,
        "metrics": MetricsConfig,
    }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TrainConfig:
        data = data or {}
        if not isinstance(data, Mapping):
            raise FlashprobeError(f"a training config must be a mapping, got {type(data).__name__}")
        for key in data:
            if key not in cls.SECTIONS:
                raise FlashprobeError(
                    f"unknown config section {key!r}; known: {', '.join(cls.SECTIONS)}"
                )
        return cls(**{k: build_config(cls.SECTIONS[k], v, k) for k, v in data.items()})

    def __post_init__(self) -> None:
        for name, cls in self.SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                object.__setattr__(self, name, build_config(cls, getattr(self, name), name))
        require(
            self.schedule.min_lr <= self.optimizer.lr,
            f"schedule.min_lr ({self.schedule.min_lr}) must be <= optimizer.lr "
            f"({self.optimizer.lr})",
        )
        for layer in self.metrics.capture_layers:
            require(
                0 <= layer < self.model.n_layer,
                f"capture.layers (metrics.capture_layers): layer {layer} out of range "
                f"0..{self.model.n_layer - 1}",
            )
        if self.data.source == "stdlib" and self.model.vocab_size not in (None, 256):
            require(
                self.model.vocab_size >= 256,  # type: ignore[operator]
                f"model.vocab_size must be >= 256 for byte tokens, got {self.model.vocab_size}",
            )

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).to_dict() for name in self.SECTIONS}

    def replace(self, **sections: Any) -> TrainConfig:
        return dataclasses.replace(self, **sections)
