"""The result store: one directory per suite cell, keyed by the cell's content hash.

    STORE/<suite>/suite.json            the suite as `flashprobe ablate` last ran it (not on
                                        --dry-run): the YAML mapping after --set, run-config
                                        overrides folded into base and every variant (loadable
                                        with --config; it plans the same cells). report and
                                        replay take the roles from it: baseline, safe and
                                        components from its replay: section, else the baseline
                                        is branch.from (store.suite_definition.suite_roles)
    STORE/<suite>/replay.json           the suite's replay: roles, variants, per-variant summary
                                        (attribution.replay)
    STORE/<suite>/logs/shard-<k>-of-<N>.log   stdout and stderr of `ablate --jobs N`'s process
                                        k (runner.parallel)
    STORE/<suite>/<variant>--<key>/        key: suite.cell_key (config + branch source + code)
        cell.json          suite, variant, grid point, seed, branch (from, step, source key),
                           key, code version (flashprobe version + git SHA)
        config.json        the resolved cell config: every TrainConfig section with defaults
                           filled in, plus capture.max_bytes (suites.cell_config)
        environment.json   where the cell started: GPU, driver, CUDA, torch, triton, git SHA and
                           dirty flag, world size (a resumed cell's finisher is in summary.json)
        run/               train_run's own folder (flashprobe.train.run):
            config.json      TrainConfig + per-layer attention, data, parameter count, start step,
                             branched_from (the source checkpoint a branched cell started from)
            metrics.jsonl    one JSON record per step (step, loss, grad_norm, lr, tokens_per_s,
                             time_s; val_loss / spectral / attention at their cadences); a
                             branched cell's records start at its branch step
            data_order.jsonl {"step": t, "offsets": [...]}: the samples of every step
            checkpoints/     step_<n:07d>/ (model + optimizer safetensors, state.json), `latest`
            captures/        see below
            summary.json     train_run's RunSummary
            interrupted.json a run cut short (Ctrl-C, a time limit's SIGINT, a shard's SIGTERM):
                             steps_done, wall_time_s and time_by_phase_s so far; it marks
                             nothing finished (digested as the cell's `interrupted`)
        replay.json        this cell's captures replayed (attribution.replay), when it was a source
        summary.json       written last; its presence marks the cell finished: the RunSummary
                           fields (steps_done, final_loss, min_loss, final_val_loss, diverged,
                           diverged_step, divergence_rule, tokens_per_s, wall_time_s) plus
                           status "done", variant, point, seed, key, branch and environment
                           (with data_digest: the sha256 of the token stream the run trained
                           on; absent in older stores, null for a token folder)

Captures (`run/captures/`, written by store.capture under capture.max_bytes):
    step_<t:07d>.safetensors   t: the 0-based optimizer step whose first micro-batch was captured
        tensor keys "layer<i>.<name>", i the 0-based layer, name one of (capture.TENSOR_NAMES)
            x         B × T × n_embd, the layer input fed to c_attn (after ln_1) as its matmul
                      consumes it (bf16 under bf16 autocast); replay's dW_Q[h] = dq_hᵀX and
                      dW_K[h] = dk_hᵀX use it (head h's B × T × D slice against X)
            q         B × H × T × D, the attention input as the kernel saw it (bf16 under
                      bf16 autocast)
            k, v      B × H_kv × T × D, likewise (H_kv = model.n_kv_head, grouped-query
                      attention; H when it is null)
            o         B × H × T × D, the attention output (before the output projection)
            do        B × H × T × D, the gradient of the loss w.r.t. o (same dtype as o)
            lse       B × H × T, fp32 natural-log log-sum-exp of the scaled causal scores
        B = the sequences kept (the first ones of the micro-batch, see the byte cap)
        metadata (strings): format "flashprobe-capture/1", step, layers (JSON list), sequences,
            sequences_in_micro_batch, causal "true", softmax_scale, attention (JSON: per layer,
            each head group's heads, impl, backend and full KernelSpec)
    manifest.json    max_bytes, share_bytes (the cap / the number of capture steps), layers,
                     planned_steps, steps: {t: {file, sequences, sequences_in_micro_batch,
                     bytes, sha256 (of the file; absent in older stores), skipped?}}; a step
                     absent from `steps` was not reached (the run diverged and stopped, or, in a
                     branched cell, it precedes the branch step); a file it lists must be there

Everything is written through temp-file-and-rename (metrics are appended line by line and a torn
last line is dropped on resume), so a killed run leaves either the old file or the new one,
never half of one. Every JSON file is strict JSON: a NaN or infinity is null, flagged under
"_nonfinite" (flashprobe.json_io). A finished cell (summary.json present) is skipped; a cell
whose run/ holds metrics but no summary was interrupted (`flashprobe ablate --resume` continues
it).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashprobe import json_io
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.atomic import write_text_atomic
from flashprobe.suites.suite import Cell, cell_key, check_name

SUMMARY = "summary.json"
RUN_DIR = "run"
SUITE_FILE = "suite.json"  # per suite: the suite as `flashprobe ablate` last ran it
ENVIRONMENT_FILE = "environment.json"  # per cell, written once when it starts


@dataclass(frozen=True)
class CellRecord:
    """A cell as found on disk."""

    path: Path
    meta: Mapping[str, Any]
    config: Mapping[str, Any]
    summary: Mapping[str, Any] | None
    #: What reading found wrong with summary.json (a value of the wrong type, read as missing;
    #: a field that contradicts cell.json); `flashprobe report` lists them in its notes.
    problems: tuple[str, ...] = ()

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def run_dir(self) -> Path:
        return self.path / RUN_DIR

    def capture_files(self) -> list[Path]:
        """This cell's capture files in step order."""
        return sorted((self.run_dir / "captures").glob("step_*.safetensors"))


class ResultStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def cell_dir(self, cell: Cell, code_version: str) -> Path:
        """STORE/<suite>/<variant>--<key>: the names verbatim (checked: never a path), so two
        cells never share a folder; refused if it resolves outside the store (a symlink)."""
        suite = check_name(cell.suite, "suite name")
        variant = check_name(cell.variant, "variant name")
        path = self.root / suite / f"{variant}--{cell_key(cell, code_version)}"
        self.check_inside(path)
        return path

    def check_inside(self, path: Path) -> None:
        """Refuse a path that resolves (symlinks followed) outside the store."""
        root = self.root.resolve()
        if not path.resolve().is_relative_to(root):
            raise FlashprobeError(f"{path} resolves to {path.resolve()}, outside the store {root}")

    def is_finished(self, cell: Cell, code_version: str) -> bool:
        return (self.cell_dir(cell, code_version) / SUMMARY).is_file()

    def is_interrupted(self, cell: Cell, code_version: str) -> bool:
        """Training started (run/ holds metrics) but the cell never finished."""
        path = self.cell_dir(cell, code_version)
        return not (path / SUMMARY).is_file() and (path / RUN_DIR / "metrics.jsonl").is_file()

    def open_cell(
        self,
        cell: Cell,
        code_version: str,
        environment: Mapping[str, Any],
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Create (or reuse) a cell's directory and write its header files.

        environment.json keeps the environment the cell started in (a resume does not replace
        it); `extra` adds keys to cell.json (e.g. the branch source's key).
        """
        path = self.cell_dir(cell, code_version)
        path.mkdir(parents=True, exist_ok=True)
        self.check_inside(path / RUN_DIR)  # a planted symlink would take the training elsewhere
        meta = {
            "suite": cell.suite,
            "variant": cell.variant,
            "point": [list(p) for p in cell.point],
            "seed": cell.seed,
            "branch_from": cell.branch_from,
            "branch_step": cell.branch_step,
            "key": cell_key(cell, code_version),
            "code_version": code_version,
            **(extra or {}),
        }
        write_json(path / "cell.json", meta)
        write_json(path / "config.json", cell.config)
        if not (path / ENVIRONMENT_FILE).is_file():
            write_json(path / ENVIRONMENT_FILE, environment)
        return path

    def reset(self, path: Path) -> None:
        """Drop a cell's training output (to start an interrupted cell over)."""
        (path / SUMMARY).unlink(missing_ok=True)
        shutil.rmtree(path / RUN_DIR, ignore_errors=True)

    def finish(self, path: Path, summary: Mapping[str, Any]) -> None:
        write_json(path / SUMMARY, summary)

    def records(self, suite: str | None = None) -> Iterator[CellRecord]:
        """Every cell directory under the store (or one suite), finished or not."""
        if not self.root.is_dir():
            raise FlashprobeError(f"result store not found: {self.root}")
        if suite is not None:
            check_suite_folder(suite)
        suites = [self.root / suite] if suite else sorted(p for p in self.root.iterdir())
        for suite_dir in suites:
            if not suite_dir.is_dir():
                continue
            for cell_dir in sorted(p for p in suite_dir.iterdir() if p.is_dir()):
                if (cell_dir / "cell.json").is_file():
                    yield self._read(cell_dir)

    def _read(self, path: Path) -> CellRecord:
        summary_path = path / SUMMARY
        meta, config = read_json(path / "cell.json"), read_json(path / "config.json")
        summary = read_json(summary_path) if summary_path.is_file() else None
        _check_meta(meta, path / "cell.json")
        _check_config(config, path / "config.json")
        if summary is not None and not isinstance(summary, dict):
            raise FlashprobeError(f"corrupt cell file {summary_path}: not a JSON object")
        problems: list[str] = []
        if summary is not None:
            summary = _checked_summary(summary, meta, problems)
        return CellRecord(path, meta, config, summary, tuple(problems))

    def check_root(self) -> None:
        """Refuse a store that is a file (checked before planning, so before any write)."""
        try:
            self.root.stat()
        except FileNotFoundError:
            return
        except OSError as exc:  # too long a name, a file on the way
            raise FlashprobeError(f"--store {self.root}: {exc.strerror}") from None
        if not self.root.is_dir():
            raise FlashprobeError(f"--store {self.root} is not a folder")

    def check_writable(self) -> None:
        """Create the store folder if needed and refuse one that cannot be written (a file, a
        read-only file system, a name too long): one line before anything is written."""
        self.check_root()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FlashprobeError(f"cannot create --store {self.root}: {exc.strerror}") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise FlashprobeError(f"--store {self.root} is not writable")


#: cell.json fields a reader relies on, and their JSON types (absent and null are allowed).
_META_TYPES: dict[str, tuple[type, ...]] = {
    "suite": (str,),
    "variant": (str,),
    "seed": (int,),
    "point": (list,),
    "branch_from": (str,),
    "branch_step": (int,),
    "key": (str,),
    "code_version": (str,),
    "source_key": (str,),
}
_CONFIG_SECTIONS = ("model", "data", "optimizer", "schedule", "train", "divergence", "metrics",
                    "capture")  # fmt: skip


def _check_meta(meta: Any, path: Path) -> None:
    if not isinstance(meta, dict):
        raise FlashprobeError(f"corrupt cell file {path}: not a JSON object")
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise FlashprobeError(
                f"corrupt cell file {path}: {key} is {type(value).__name__} {value!r:.40}, "
                f"expected {types[0].__name__}"
            )
    for pair in meta.get("point") or []:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise FlashprobeError(f"corrupt cell file {path}: point holds {pair!r:.40}")


#: summary.json fields readers compute with, and their JSON types (null is allowed).
SUMMARY_TYPES: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "steps_done": (int,),
    "final_loss": (int, float),
    "min_loss": (int, float),
    "final_val_loss": (int, float),
    "diverged": (bool,),
    "diverged_step": (int,),
    "divergence_rule": (str,),
    "tokens_per_s": (int, float),
    "wall_time_s": (int, float),
}
#: Fields every summary.json has (RunSummary writes them): what a finished run's outcome is read
#: from. One absent (a truncated or hand-made summary, `{}`) reads as missing, like a value of
#: the wrong type, and the store check says so.
SUMMARY_REQUIRED = ("steps_done", "diverged")
#: Fields summary.json repeats from cell.json: they must agree.
_SHARED_FIELDS = ("suite", "variant", "seed", "point", "key", "code_version", "branch_from",
                  "branch_step")  # fmt: skip


def _checked_summary(
    summary: dict[str, Any], meta: Mapping[str, Any], problems: list[str]
) -> dict[str, Any]:
    """summary.json with values of the wrong type read as missing (None); what was wrong, and
    where it contradicts cell.json, goes into `problems`."""
    out = dict(summary)
    absent = [key for key in SUMMARY_REQUIRED if key not in out]
    if absent:
        problems.append(f"summary.json lacks {', '.join(absent)} (read as missing)")
    for key, types in SUMMARY_TYPES.items():
        value = out.get(key)
        if value is not None and not json_io.has_type(value, types):
            problems.append(
                f"summary.json {key} is {type(value).__name__} {value!r:.40} (read as missing)"
            )
            out[key] = None
    done = out.get("steps_done")
    if isinstance(done, int) and done < 0:
        problems.append(f"summary.json steps_done {done} is negative (read as missing)")
        out["steps_done"] = None
    for key in _SHARED_FIELDS:
        if key in out and key in meta and out[key] != meta[key]:
            problems.append(
                f"summary.json {key} {out[key]!r:.40} contradicts cell.json {meta[key]!r:.40}"
            )
    done, step = out.get("steps_done"), out.get("diverged_step")
    if out.get("diverged") and step is None:
        problems.append("summary.json says diverged but gives no diverged_step")
    if isinstance(done, int) and isinstance(step, int) and not 0 <= step < done:
        problems.append(f"summary.json diverged_step {step} is outside its {done} steps")
    return out


def _check_config(config: Any, path: Path) -> None:
    if not isinstance(config, dict):
        raise FlashprobeError(f"corrupt cell file {path}: not a JSON object")
    for key in _CONFIG_SECTIONS:
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise FlashprobeError(f"corrupt cell file {path}: {key} is not a JSON object")


def store_around(path: str | Path) -> Path | None:
    """The result store `path` lies in, judged by what a store holds (a cell's cell.json, a
    suite's suite.json) in the folders above it; None when it lies in none."""
    for folder in Path(path).resolve().parents:
        if (folder / "cell.json").is_file():
            return folder.parent.parent
        if (folder / SUITE_FILE).is_file():
            return folder.parent
        try:
            children = [child for child in folder.iterdir() if child.is_dir()]
        except OSError:
            continue
        for child in children:
            if (child / "cell.json").is_file():
                return folder.parent  # a suite folder
            if (child / SUITE_FILE).is_file():
                return folder  # the store itself
    return None


def check_suite_folder(suite: str) -> None:
    """A suite named on the command line (`--suite`) is one folder of the store, never a path
    (a store written before names were checked may hold names `check_name` now refuses)."""
    if suite in ("", ".", "..") or "/" in suite or "\0" in suite:
        raise FlashprobeError(f"--suite {suite!r} is not a suite name")


def write_json(path: Path, data: Any) -> None:
    """Strict JSON (a NaN is null plus a flag: flashprobe.json_io), atomically."""
    write_text_atomic(path, json_io.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    try:
        return json_io.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FlashprobeError(f"missing file in result store: {path}") from None
    except json.JSONDecodeError as exc:
        raise FlashprobeError(f"corrupt JSON in result store: {path} (line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise FlashprobeError(f"corrupt JSON in result store: {path} (not UTF-8)") from None
    except OSError as exc:
        raise FlashprobeError(f"cannot read {path}: {exc.strerror}") from None
