"""Whether a checkpoint may be continued: resumed by its own run, or branched from by another."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flashprobe.errors import FlashprobeError
from flashprobe.train.checkpoint import Checkpoint, checkpoint_problem
from flashprobe.train.config import TrainConfig

#: Config keys a resumed run may change (everything else must match the run's config.json).
RESUMABLE_KEYS = frozenset(
    {
        "train.steps",
        "train.checkpoint_every",
        "train.checkpoint_final",
        "train.keep_checkpoints",
        "divergence.stop",
    }
)


def check_resumable(
    checkpoint: Checkpoint, config: TrainConfig, out_dir: Path, data_digest: str | None = None
) -> None:
    """Raise unless `config` differs from the checkpoint's only in RESUMABLE_KEYS, and the token
    stream is the one the run trained on (the same config can build another corpus when the
    interpreter's sources changed; a run would then mix two and record only the second)."""
    saved = checkpoint.state.get("config")
    if isinstance(saved, dict):  # a changed data key first: it names the cause
        for key, (old, new) in _differences(saved, config.to_dict()).items():
            if key not in RESUMABLE_KEYS:
                raise FlashprobeError(
                    f"cannot resume {out_dir}: config key {key} changed ({old!r} → {new!r})"
                )
    theirs = checkpoint.state.get("data_digest")
    if theirs is not None and data_digest is not None and theirs != data_digest:
        raise FlashprobeError(
            f"cannot resume {out_dir}: the data changed (digest {theirs[:12]} → "
            f"{data_digest[:12]}); train it again in a new store, or rebuild the old corpus"
        )


def check_branchable(checkpoint: Checkpoint, config: TrainConfig, data_digest: str | None) -> None:
    """Raise unless the checkpoint's run has this seed, batch size, optimizer and data: the
    branch then continues on the identical data order; nor from a damaged checkpoint (a tensor
    file cut short or changed: safetensors' own error would not name it)."""
    problem = checkpoint_problem(checkpoint.path)
    if problem is not None:
        raise FlashprobeError(f"cannot branch from {checkpoint.path}: {problem}")
    state, train = checkpoint.state, config.train
    checks = [
        ("train.seed", state["seed"], train.seed),
        ("train.batch_size", state["batch_size"], train.batch_size),
        ("optimizer.name", state["optimizer_name"], config.optimizer.name),
        ("data digest", state["data_digest"], data_digest),
    ]
    for name, theirs, ours in checks:
        if theirs != ours:
            raise FlashprobeError(
                f"cannot branch from {checkpoint.path}: {name} differs ({theirs!r} vs {ours!r})"
            )


def _differences(old: Any, new: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(old) | set(new)):
            out.update(_differences(old.get(key), new.get(key), f"{prefix}{key}."))
        return out
    return {} if old == new else {prefix.rstrip("."): (old, new)}
