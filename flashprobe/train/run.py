"""`train_run`: train one GPT under one config, with metrics, divergence stops and checkpoints.

A run folder holds:
  config.json        the resolved config (+ the attention each layer uses, data description)
  metrics.jsonl      one record per logged step (see MetricsConfig)
  data_order.jsonl   the global batch's sample offsets of every step (data.record_offsets)
  checkpoints/       step_<n>/ folders and `latest` (see flashprobe.train.checkpoint)
  captures/          step_<t>.safetensors with Q, K, V, O, LSE, dO of the captured layers
  summary.json       the RunSummary
  interrupted.json   a run cut short (KeyboardInterrupt): its steps, wall time and time by phase
                     so far (run_state.interrupted_record); deleted when the run is resumed

Step t (0-based) reads the batch `BatchSampler(seed).offsets(t)` and reseeds torch from
(seed, t, rank) (train.determinism), so resuming or branching from a checkpoint (checked by
train.continuation) replays exactly what an uninterrupted run would do. Validation loss and
spectral norms of step t are measured after its update; its attention stats and captures come
from its own forward. The run's records (RunState, RunSummary): train.run_state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file
from torch.nn.parallel import DistributedDataParallel

from flashprobe import json_io
from flashprobe.data.dataset import TokenDataset, open_dataset
from flashprobe.data.sampler import BatchSampler, batch_at, rank_share
from flashprobe.data.token_files import check_model_vocab
from flashprobe.errors import FlashprobeError
from flashprobe.model.gpt import GPT
from flashprobe.reporting.atomic import default_mode, write_text_atomic
from flashprobe.train.checkpoint import (
    Checkpoint,
    load_optimizer,
    load_weights,
    read_checkpoint,
    resume_point,
    save_checkpoint,
)
from flashprobe.train.config import TrainConfig
from flashprobe.train.continuation import check_branchable, check_resumable
from flashprobe.train.determinism import cpu_threads, set_deterministic, step_seed
from flashprobe.train.distributed import Distributed, setup_distributed
from flashprobe.train.divergence import Divergence, DivergenceMonitor
from flashprobe.train.evaluate import validation_loss
from flashprobe.train.interrupt import DeferredInterrupt
from flashprobe.train.metrics import JsonlLog, qk_spectral_norms, truncate_jsonl
from flashprobe.train.optim import build_optimizer
from flashprobe.train.precision import autocast_context
from flashprobe.train.run_state import (
    INTERRUPTED,
    RunState,
    RunSummary,
    interrupted_record,
    time_by_phase,
)
from flashprobe.train.schedule import lr_at

Progress = Callable[[dict[str, Any]], None]
#: Receives (step, {"layer{i}.{q,k,v,o,lse,do}": CPU tensor}) on rank 0 instead of the default
#: captures/step_<t>.safetensors writer (e.g. the ablation runner's size-capped writer).
CaptureSink = Callable[[int, dict[str, torch.Tensor]], None]

#: A record holding only these is skipped between log_every steps; any other key forces a write.
EVERY_STEP_KEYS = frozenset({"step", "loss", "grad_norm", "lr", "tokens_per_s", "time_s"})


def train_run(
    config: TrainConfig | dict[str, Any],
    out_dir: Path,
    *,
    resume: bool = False,
    start_from: Path | None = None,
    progress: Progress | None = None,
    capture: CaptureSink | None = None,
) -> RunSummary:
    """Train (or resume, or branch from a baseline checkpoint) one run into `out_dir`.

    resume: continue from out_dir's newest intact checkpoint that its logs reach intact
        (checkpoint.resume_point; start fresh when it has none); a damaged newer checkpoint or
        log line is named in the summary's resume_notes.
    start_from: a checkpoint (or a run folder: its latest) of another run with the same model
        shape, optimizer, seed and batch size, to branch from: this run continues from that
        step with its own config (e.g. another attention kernel) on the identical data order.
    progress: called on rank 0 with every step's metrics record.
    capture: writes the tensors captured at metrics.capture_steps (default: one uncapped
        safetensors file per step in out_dir/captures).
    """
    if not isinstance(config, TrainConfig):
        config = TrainConfig.from_dict(config)
    if resume and start_from is not None:
        raise FlashprobeError("pass either resume or start_from, not both")
    out_dir = Path(out_dir)
    with cpu_threads(config.train.cpu_threads):
        dist = setup_distributed(config.train.device)
        try:
            return _Run(config, out_dir, dist, progress, capture).execute(resume, start_from)
        finally:
            dist.close()


class _Run:
    def __init__(
        self,
        config: TrainConfig,
        out_dir: Path,
        dist: Distributed,
        progress: Progress | None,
        capture: CaptureSink | None = None,
    ) -> None:
        self.config, self.out_dir, self.dist, self.progress = config, out_dir, dist, progress
        self.capture_sink: CaptureSink = capture or self._write_capture
        self.micro_batch, self.accumulation = config.train.accumulation(dist.world_size)
        self.dataset: TokenDataset = open_dataset(config.data)
        model_config = config.model
        check_model_vocab(model_config.vocab_size, self.dataset.vocab_size)
        if model_config.vocab_size is None:
            model_config = model_config.with_vocab(self.dataset.vocab_size)
        if dist.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = config.train.allow_tf32
            torch.backends.cudnn.allow_tf32 = config.train.allow_tf32
        set_deterministic(config.train.deterministic)
        torch.manual_seed(config.train.seed)  # the initial weights depend on the seed only
        self.model = GPT(model_config).to(dist.device)
        self.optimizer = build_optimizer(self.model, config.optimizer)
        self.trained: torch.nn.Module = self.model
        if config.train.compile:
            self.trained = torch.compile(self.model, mode=config.train.compile_mode)  # type: ignore[assignment]
        if dist.world_size > 1:
            ids = [dist.device.index] if dist.device.type == "cuda" else None
            self.trained = DistributedDataParallel(self.trained, device_ids=ids)
        self.sampler = BatchSampler(
            len(self.dataset.train), model_config.block_size, config.train.batch_size,
            config.train.seed,
        )  # fmt: skip
        self.monitor = DivergenceMonitor(config.divergence)
        self.state = RunState()
        self.branched_from: str | None = None
        self.resume_notes: tuple[str, ...] = ()

    # -- setup -----------------------------------------------------------------------------------
    def execute(self, resume: bool, start_from: Path | None) -> RunSummary:
        if resume:
            point = resume_point(self.out_dir)
            self.resume_notes = point.notes
            if point.checkpoint is not None:
                checkpoint = read_checkpoint(point.checkpoint)
                check_resumable(checkpoint, self.config, self.out_dir, self.dataset.digest)
                self._restore(checkpoint)
        elif start_from is not None:
            checkpoint = read_checkpoint(Path(start_from))
            check_branchable(checkpoint, self.config, self.dataset.digest)
            self._restore(checkpoint)
            self.branched_from = str(checkpoint.path)
        if not resume and (self.out_dir / "metrics.jsonl").exists():
            raise FlashprobeError(
                f"{self.out_dir} already holds a run; resume it or choose another folder"
            )
        if self.dist.is_main:
            self._prepare_files()
        self.dist.barrier()
        return self._loop()

    def _restore(self, checkpoint: Checkpoint) -> None:
        load_weights(checkpoint, self.model)
        load_optimizer(checkpoint, self.optimizer)
        self.monitor.load_state_dict(checkpoint.state["divergence"])
        self.state = RunState(**checkpoint.state["run"])

    def _prepare_files(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "data_order.jsonl"):
            truncate_jsonl(self.out_dir / name, self.state.step)
        # A cut's record describes the run as it stopped; resumed, the run is past it (a new cut
        # writes a new one; a failure or a kill must not leave the old one standing).
        (self.out_dir / INTERRUPTED).unlink(missing_ok=True)
        record = {
            "config": self.config.to_dict(),
            "attention": self.model.config.describe_attention(),
            "data": self.dataset.description,
            "data_digest": self.dataset.digest,
            "parameters": self.model.num_params(),
            "world_size": self.dist.world_size,
            "micro_batch_size": self.micro_batch,
            "accumulation": self.accumulation,
            "device": str(self.dist.device),
            "cpu_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "branched_from": self.branched_from,
            "start_step": self.state.step,
        }
        if self.state.step == 0 or not _readable(self.out_dir / "config.json"):
            write_text_atomic(self.out_dir / "config.json", json_io.dumps(record, indent=1) + "\n")

    # -- the loop --------------------------------------------------------------------------------
    def _loop(self) -> RunSummary:
        cfg = self.config
        metrics_log = data_log = None
        if self.dist.is_main:
            metrics_log = JsonlLog(self.out_dir / "metrics.jsonl")
            if cfg.data.record_offsets:
                data_log = JsonlLog(self.out_dir / "data_order.jsonl")
        wall_start = time.perf_counter() - self.state.wall_time_s
        stopped = cfg.divergence.stop and self.monitor.first is not None
        try:
            with DeferredInterrupt(enabled=self.dist.world_size == 1) as interrupt:
                while self.state.step < cfg.train.steps and not stopped:
                    step = self.state.step
                    record, divergence = self._train_step(step, data_log)
                    self.state.step = step + 1
                    self._periodic_metrics(step, record)
                    self.state.wall_time_s = time.perf_counter() - wall_start
                    if metrics_log is not None and (
                        _every(cfg.metrics.log_every, step)
                        or not EVERY_STEP_KEYS.issuperset(record)
                    ):
                        metrics_log.write(record)
                    if self.progress is not None and self.dist.is_main:
                        self.progress(record)
                    stopped = divergence is not None and cfg.divergence.stop
                    last = self.state.step == cfg.train.steps or stopped
                    due = _every(cfg.train.checkpoint_every, step) or (
                        last and cfg.train.checkpoint_final
                    )
                    cut = interrupt.requested and not (last or stopped)  # else: just finish
                    if due or cut:
                        with self._timed("checkpoint"):
                            self._checkpoint()
                        self.state.wall_time_s = time.perf_counter() - wall_start
                    if cut:  # resumable from this very step
                        raise KeyboardInterrupt
        except KeyboardInterrupt:  # cut short: keep where its time went (no summary: unfinished)
            if self.dist.is_main:
                self.state.wall_time_s = time.perf_counter() - wall_start
                record = json_io.dumps(interrupted_record(self.state), indent=1) + "\n"
                # A record that cannot be written (disk full) must not replace the interrupt.
                with contextlib.suppress(OSError):
                    write_text_atomic(self.out_dir / INTERRUPTED, record)
            raise
        finally:
            for log in (metrics_log, data_log):
                if log is not None:
                    log.close()
        summary = self._summary()
        if self.dist.is_main:
            write_text_atomic(
                self.out_dir / "summary.json", json_io.dumps(summary.to_dict(), indent=1) + "\n"
            )
        return summary

    def _train_step(
        self, step: int, data_log: JsonlLog | None
    ) -> tuple[dict[str, Any], Divergence | None]:
        cfg, dist = self.config, self.dist
        lr = lr_at(step, cfg.optimizer.lr, cfg.schedule, cfg.train.steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        offsets = self.sampler.offsets(step)
        if data_log is not None:
            data_log.write({"step": step, "offsets": offsets.tolist()})
        torch.manual_seed(step_seed(cfg.train.seed, step, dist.rank))
        want_stats = _every(cfg.metrics.attention_stats_every, step)
        capture = cfg.metrics.capture_layers if step in cfg.metrics.capture_steps else ()
        instrument = (
            self.model.instrument(stats=want_stats, capture_layers=capture)
            if want_stats or capture
            else contextlib.nullcontext()
        )
        # A compiled model would recompile for each step's new recorder: run those eagerly.
        eager = (
            torch.compiler.set_stance("force_eager")
            if cfg.train.compile and (want_stats or capture)
            else contextlib.nullcontext()
        )
        start = time.perf_counter()
        with instrument as recorder, eager:
            loss = self._forward_backward(rank_share(offsets, dist.rank, dist.world_size))
        max_norm = cfg.train.grad_clip if cfg.train.grad_clip is not None else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        divergence = self.monitor.update(step, loss, grad_norm)
        finite = math.isfinite(loss) and math.isfinite(grad_norm)
        if finite:  # a non-finite step would only write NaNs into the weights
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if dist.device.type == "cuda":
            torch.cuda.synchronize(dist.device)
        elapsed = time.perf_counter() - start
        tokens = cfg.train.batch_size * self.model.config.block_size
        self.state.train_time_s += elapsed
        self.state.tokens += tokens
        self.state.last_loss = loss
        if math.isfinite(loss):
            self.state.min_loss = (
                loss if self.state.min_loss is None else min(self.state.min_loss, loss)
            )
        record: dict[str, Any] = {
            "step": step,
            "loss": loss,
            "grad_norm": grad_norm,
            "lr": lr,
            "tokens_per_s": tokens / elapsed,
            "time_s": self.state.wall_time_s,
        }
        if not finite:
            record["skipped_update"] = True
        if divergence is not None:
            record["divergence"] = divergence.to_dict()
        if recorder is not None:
            if want_stats:
                record["attention"] = recorder.stats_dict()
            if capture and dist.is_main:
                with self._timed("capture"):
                    self.capture_sink(step, recorder.tensors)
        return record, divergence

    def _forward_backward(self, offsets: np.ndarray) -> float:
        total = torch.zeros((), dtype=torch.float32, device=self.dist.device)
        block = self.model.config.block_size
        for micro in range(self.accumulation):
            chunk = offsets[micro * self.micro_batch : (micro + 1) * self.micro_batch]
            x, y = batch_at(self.dataset.train, chunk, block, self.dist.device)
            sync = micro == self.accumulation - 1
            no_sync = (
                self.trained.no_sync()
                if isinstance(self.trained, DistributedDataParallel) and not sync
                else contextlib.nullcontext()
            )
            with no_sync:
                with autocast_context(self.dist.device, self.config.train.precision):
                    _, loss = self.trained(x, y)
                (loss / self.accumulation).backward()
            total += loss.detach()
        return float(self.dist.mean(total / self.accumulation))

    def _periodic_metrics(self, step: int, record: dict[str, Any]) -> None:
        cfg = self.config.metrics
        last = step + 1 == self.config.train.steps
        if cfg.eval_every and (_every(cfg.eval_every, step) or last):
            with self._timed("eval"):
                self.state.last_val_loss = validation_loss(
                    self.model,
                    self.dataset.val,
                    batches=cfg.eval_batches,
                    micro_batch_size=self.micro_batch,
                    dist=self.dist,
                    precision=self.config.train.precision,
                )
            record["val_loss"] = self.state.last_val_loss
        if _every(cfg.spectral_every, step):
            with self._timed("spectral"):
                record["spectral"] = qk_spectral_norms(self.model)

    @contextlib.contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        """Add the block's time (device work included) to the run's phase_time_s."""
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.dist.device.type == "cuda":
                torch.cuda.synchronize(self.dist.device)
            self.state.add_phase_time(phase, time.perf_counter() - start)

    def _write_capture(self, step: int, tensors: dict[str, torch.Tensor]) -> None:
        folder = self.out_dir / "captures"
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"step_{step:07d}.safetensors"
        tmp = folder / f".{final.name}.tmp"
        save_file(tensors, str(tmp), metadata={"step": str(step)})
        tmp.chmod(default_mode())  # safetensors writes 0o600
        tmp.replace(final)

    def _checkpoint(self) -> None:
        if self.dist.is_main:
            extra = {
                "seed": self.config.train.seed,
                "batch_size": self.config.train.batch_size,
                "optimizer_name": self.config.optimizer.name,
                "data_digest": self.dataset.digest,
                "config": self.config.to_dict(),
                "run": dataclasses.asdict(self.state),
                "divergence": self.monitor.state_dict(),
                "rng": "torch is reseeded from (seed, step, rank) every step",
            }
            save_checkpoint(
                self.out_dir,
                self.state.step,
                self.model,
                self.optimizer,
                extra,
                keep=self.config.train.keep_checkpoints,
            )
        self.dist.barrier()

    def _summary(self) -> RunSummary:
        first = self.monitor.first
        state = self.state
        return RunSummary(
            out_dir=str(self.out_dir),
            steps_done=state.step,
            final_loss=state.last_loss,
            min_loss=state.min_loss,
            final_val_loss=state.last_val_loss,
            diverged=first is not None,
            diverged_step=first.step if first else None,
            divergence_rule=first.rule if first else None,
            tokens_per_s=state.tokens / state.train_time_s if state.train_time_s else 0.0,
            wall_time_s=state.wall_time_s,
            time_by_phase_s=time_by_phase(state),
            resume_notes=self.resume_notes,
            data_digest=self.dataset.digest,
        )


def _readable(path: Path) -> bool:
    try:
        json_io.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def _every(period: int, step: int) -> bool:
    """True on every period-th step (steps period-1, 2·period-1, ...); never when period is 0."""
    return period > 0 and (step + 1) % period == 0
