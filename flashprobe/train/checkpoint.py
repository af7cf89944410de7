"""Checkpoints that load without executing code: safetensors for tensors, JSON for the rest.

Layout of one checkpoint folder (`checkpoints/step_0001000/`, the step count completed):
  model.safetensors      model weights (fp32 master weights; the tied LM head stored once)
  optimizer.safetensors  every tensor of the optimizer state ("state.<param index>.<name>")
  state.json             step, seed, config, optimizer groups and scalars, run-loop state,
                         and the SHA-256 of both safetensors files ("files")
The folder is written under a temporary name and renamed into place, then `checkpoints/latest`
is replaced atomically, so a crash never leaves a half checkpoint that `latest` points to.
The RNG needs no saving: the loop reseeds torch from (seed, step) at every step.

A resume starts from `resume_point`: the newest checkpoint that is intact (its files match
their checksums) and that the step logs reach intact, so a damaged checkpoint or log line costs
the steps since an earlier checkpoint, recomputed, never a silent gap or a restart from 0.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from flashprobe import json_io
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.atomic import default_mode, write_text_atomic
from flashprobe.reporting.render import to_jsonable

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
TENSOR_FILES = ("model.safetensors", "optimizer.safetensors")
#: The step logs a resume truncates to its checkpoint (flashprobe.train.run).
STEP_LOGS = ("metrics.jsonl", "data_order.jsonl")
_FOLDER = re.compile(r"step_(\d+)")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    state: dict[str, Any]  # the parsed state.json


def checkpoint_name(step: int) -> str:
    return f"step_{step:07d}"


def checkpoint_step(path: Path) -> int:
    """The step of a checkpoint folder (the inverse of checkpoint_name)."""
    return int(path.name.split("_")[-1])


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, Any],
    keep: int | None = None,
) -> Path:
    """Write checkpoint `step` of a run; returns its folder."""
    root = run_dir / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(root)
    final = root / checkpoint_name(step)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        tmp.chmod(default_mode(folder=True))  # mkdtemp's 0o700 would hide it from the team
        save_model(model, str(tmp / "model.safetensors"))
        tensors, optimizer_meta = _split_optimizer_state(optimizer.state_dict())
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        files = {name: _sha256(tmp / name) for name in TENSOR_FILES}
        state = {"step": step, "optimizer": optimizer_meta, "files": files, **extra}
        # A diverged run's last checkpoint may hold NaN losses: null plus a flag (strict JSON).
        (tmp / "state.json").write_text(json_io.dumps(state, indent=1, default=to_jsonable))
        for written in tmp.iterdir():  # safetensors writes 0o600
            written.chmod(default_mode())
        if final.exists():  # rewriting the same step (a resumed run); replace it whole
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_text_atomic(root / LATEST, final.name + "\n")
    if keep is not None:
        _prune(root, keep)
    return final


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run starts: `checkpoint` (None: from the start) at `step`, and why not
    from its newest checkpoint, if it is not (`notes`, one line each)."""

    checkpoint: Path | None
    step: int
    newest: int | None  # the newest checkpoint's step, intact or not
    notes: tuple[str, ...] = ()

    def describe(self) -> str | None:
        """One line when the resume goes back past the newest checkpoint, else None."""
        if not self.notes:
            return None
        where = f"step {self.step}" if self.checkpoint is not None else "the start"
        return f"resumed from {where}, not step {self.newest}: {'; '.join(self.notes)}"


def resume_point(run_dir: Path) -> ResumePoint:
    """The newest intact checkpoint of a run that its step logs reach intact (STEP_LOGS: a
    damaged line at step s allows no checkpoint past s, see metrics.intact_end)."""
    from flashprobe.train.metrics import intact_end

    folders = checkpoint_folders(run_dir)
    newest = folders[-1][0] if folders else None
    bound, notes = None, []
    for name in STEP_LOGS:
        end = intact_end(run_dir / name)
        if end is not None and newest is not None and end[0] < newest:
            bound = end[0] if bound is None else min(bound, end[0])
            notes.append(f"{name} line {end[1]} is damaged (steps from {end[0]} are recomputed)")
    for step, path in reversed(folders):
        if bound is not None and step > bound:
            continue
        problem = checkpoint_problem(path)
        if problem is None:
            return ResumePoint(path, step, newest, tuple(notes))
        notes.append(f"checkpoint {path.name} is damaged ({problem})")
    return ResumePoint(None, 0, newest, tuple(notes))


def checkpoint_folders(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every checkpoint folder of a run, by step (temporary ones left out)."""
    root = run_dir / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = [(int(m[1]), p) for p in root.iterdir() if (m := _FOLDER.fullmatch(p.name))]
    return sorted(f for f in found if f[1].is_dir())


def checkpoint_problem(path: Path) -> str | None:
    """Why a checkpoint folder cannot be resumed from (None: it can): state.json unreadable or
    of another step, a tensor file missing, not matching its checksum, or (a checkpoint written
    before checksums) with an unreadable header."""
    try:
        state = json_io.loads((path / "state.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no state.json"
    except (OSError, ValueError):
        return "state.json is unreadable"
    match = _FOLDER.fullmatch(path.name)
    if not isinstance(state, dict) or match is None or state.get("step") != int(match[1]):
        return "state.json is not this checkpoint's"
    hashes = state.get("files") if isinstance(state.get("files"), dict) else {}
    for name in TENSOR_FILES:
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if name in hashes:
            if _sha256(file) != hashes[name]:
                return f"{name} does not match its checksum"
        elif not _readable_safetensors(file):
            return f"{name} is unreadable"
    return None


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _readable_safetensors(path: Path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            handle.keys()
    except Exception:  # safetensors raises its own error types for a bad header
        return False
    return True


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint folder `checkpoints/latest` names; None when it names no checkpoint
    folder (missing, empty, not text, a path elsewhere)."""
    pointer = run_dir / CHECKPOINT_DIR / LATEST
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not _FOLDER.fullmatch(name):
        return None
    path = run_dir / CHECKPOINT_DIR / name
    return path if path.is_dir() else None


def find_checkpoint(path: Path) -> Path:
    """A checkpoint folder from itself, a run folder (its latest) or a checkpoints folder."""
    if (path / "state.json").is_file():
        return path
    run_dir = path.parent if path.name == CHECKPOINT_DIR else path
    found = latest_checkpoint(run_dir)
    if found is not None:
        return found
    raise FlashprobeError(f"no checkpoint found at {path}")


def read_checkpoint(path: Path) -> Checkpoint:
    path = find_checkpoint(path)
    try:
        state = json_io.loads((path / "state.json").read_text())
    except (OSError, ValueError):
        raise FlashprobeError(f"unreadable checkpoint state: {path / 'state.json'}") from None
    return Checkpoint(path, int(state["step"]), state)


def load_weights(checkpoint: Checkpoint, model: torch.nn.Module) -> None:
    device = next(model.parameters()).device
    try:
        missing, unexpected = load_model(
            model, str(checkpoint.path / "model.safetensors"), strict=False, device=str(device)
        )
    except RuntimeError as exc:  # shape mismatch: a different model config
        first = str(exc).strip().splitlines()[-1].strip()
        raise FlashprobeError(f"{checkpoint.path} does not fit this model: {first}") from None
    if missing or unexpected:
        name = (sorted(missing) or sorted(unexpected))[0]
        raise FlashprobeError(f"{checkpoint.path} does not fit this model (parameter {name})")


def load_optimizer(checkpoint: Checkpoint, optimizer: torch.optim.Optimizer) -> None:
    tensors = load_file(str(checkpoint.path / "optimizer.safetensors"))
    state_dict = _join_optimizer_state(tensors, checkpoint.state["optimizer"])
    try:
        optimizer.load_state_dict(state_dict)
    except (ValueError, KeyError) as exc:
        raise FlashprobeError(f"{checkpoint.path}: optimizer state does not fit: {exc}") from None


def _split_optimizer_state(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], Any]:
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in state_dict["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{name}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def _join_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = tensor
    for index, entries in meta["scalars"].items():
        state.setdefault(int(index), {}).update(entries)
    groups = [
        {k: tuple(v) if k == "betas" else v for k, v in group.items()}
        for group in meta["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


def _remove_abandoned(root: Path) -> None:
    """Remove the temporary folders of checkpoint writes a killed process left (SIGKILL, a lost
    machine: each as large as a checkpoint). Only the run's writer calls this, and a cell has
    one writer at a time (runner.cell_lock), so none of them is being written."""
    for abandoned in root.glob(".step_*.tmp"):
        shutil.rmtree(abandoned, ignore_errors=True)


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
