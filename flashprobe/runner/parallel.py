"""`flashprobe ablate --jobs N`: train a suite in N processes side by side, one shard each.

A small model leaves most of a big GPU idle; N processes on it train more per hour (3 on one
H200: about 1.6x the throughput of one). The parent has validated and planned the whole suite
and written suite.json; it then starts N children, child k being

    python -m flashprobe ablate -c CONFIG [--set ...] [--variant ...] [--resume|--restart]
        --store STORE --shard k/N --no-replay --format json

(runner.shards.select_shard: whole (grid point, seed) groups when the suite branches, so
a branched cell runs after its source in the same child; single cells when it does not). They
share the store (one folder per cell, atomic writes); child k's stdout and stderr go to
STORE/<suite>/logs/shard-k-of-N.log (appended to, each start under a dated line). A shard with
nothing to train is not started. Each child gets 1/N of the CPU cores (OMP_NUM_THREADS, unless
set) for what it runs besides training: a cell trains with its own train.cpu_threads however
it is run, so --jobs changes no number. On Ctrl-C the children are stopped (see `stop`): their
unfinished cells stay resumable with --resume.

On a machine with several CUDA GPUs the children are spread over them (`spread_over_gpus`:
child k of those with cells to train sees GPU k mod G alone, through CUDA_VISIBLE_DEVICES), so
`--jobs G` trains G independent units at once; with one GPU they share it as before.

The children die with the parent, however it dies (kill -9 included): on Linux the kernel sends
each SIGTERM when the parent goes (prctl PR_SET_PDEATHSIG), and each child also watches its
parent's pid (`watch_parent`, the fallback elsewhere); a child stops on SIGTERM as on a second
Ctrl-C (at once; the cell stays resumable), so no orphan goes on writing the store.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from flashprobe.errors import FlashprobeError
from flashprobe.runner.plan import PlannedCell
from flashprobe.runner.shards import shard_numbers, shard_of
from flashprobe.runner.training import CellOutcome

LOG_DIR = "logs"  # STORE/<suite>/logs/shard-<k>-of-<N>.log
PARENT_ENV = "FLASHPROBE_SHARD_PARENT"  # a child's parent pid, for `watch_parent`
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Shard:
    """One child process: shard `index` of `count`, its command line and log file."""

    index: int
    count: int
    command: tuple[str, ...]
    log: Path
    cells: int  # cells it has to train (the others of its shard are finished)
    gpu: str | None = None  # its CUDA_VISIBLE_DEVICES (None: the parent's)

    @property
    def name(self) -> str:
        return f"shard {self.index}/{self.count}"


@dataclass(frozen=True)
class ShardResult:
    shard: Shard
    returncode: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def check_jobs(jobs: int) -> None:
    """--jobs N > 1 starts its own processes: not under torchrun, which already has several."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise FlashprobeError(f"--jobs must be an integer >= 1, got {jobs!r}")
    if jobs > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise FlashprobeError(
            "--jobs does not combine with torchrun (WORLD_SIZE > 1): use --jobs 1 there, or "
            "--shard K/N to split a suite over torchrun jobs"
        )


def log_path(store_root: Path, suite: str, index: int, count: int) -> Path:
    return store_root / suite / LOG_DIR / f"shard-{index}-of-{count}.log"


def child_command(
    index: int,
    count: int,
    *,
    config: str,
    overrides: Sequence[str],
    variants: Sequence[str],
    store: Path,
    resume: bool,
    restart: bool,
) -> list[str]:
    """The `flashprobe ablate` command line of shard `index` of `count`: the parent's suite
    arguments (so it plans the same cells and writes the same suite.json), one shard of it,
    no replay (the parent replays once every shard is done) and a JSON summary for the log."""
    command = [sys.executable, "-m", "flashprobe", "ablate", "--config", config]
    for override in overrides:
        command += ["--set", override]
    for variant in variants:
        command += ["--variant", variant]
    command += ["--resume"] if resume else []
    command += ["--restart"] if restart else []
    command += ["--store", str(store), "--shard", f"{index}/{count}"]
    return [*command, "--no-replay", "--format", "json"]


def plan_shards(
    plan: Sequence[PlannedCell],
    count: int,
    *,
    store_root: Path,
    suite: str,
    command: Callable[[int, int], Sequence[str]],
) -> list[Shard]:
    """`count` shards of a planned suite; `command(index, count)` is a child's command line."""
    numbers = shard_numbers([p.cell for p in plan])
    return [
        Shard(
            index=index,
            count=count,
            command=tuple(command(index, count)),
            log=log_path(store_root, suite, index, count),
            cells=sum(
                p.action != "skip" and shard_of(p.cell, numbers, count) == index for p in plan
            ),
        )
        for index in range(count)
    ]


def visible_gpus() -> list[str]:
    """The CUDA GPUs this process may use, as CUDA_VISIBLE_DEVICES entries ([]: none)."""
    import torch

    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(count)]
    return [entry.strip() for entry in listed.split(",") if entry.strip()][:count]


def spread_over_gpus(shards: Sequence[Shard], gpus: Sequence[str]) -> list[Shard]:
    """With several GPUs, give the shards that have cells to train one GPU each, in turn (more
    shards than GPUs: they share them evenly); with one GPU or none, change nothing."""
    if len(gpus) < 2:
        return list(shards)
    busy = [s for s in shards if s.cells]
    turn = {s.index: gpus[i % len(gpus)] for i, s in enumerate(busy)}
    return [dataclasses.replace(s, gpu=turn.get(s.index)) for s in shards]


def run_shards(
    shards: Iterable[Shard],
    *,
    say: Callable[[str], None],
    poll_s: float = 0.2,
    settle_s: float = 10.0,
    grace_s: float = 10.0,
) -> list[ShardResult]:
    """Start every shard that has cells to train and wait for all of them; `say` gets one line
    per shard as it starts and as it ends. Results in shard order (a failed child does not stop
    the others). An exception here (KeyboardInterrupt: Ctrl-C) stops the children, then
    propagates."""
    running: dict[int, tuple[Shard, subprocess.Popen[bytes], float]] = {}
    results: list[ShardResult] = []
    try:
        for shard in shards:
            if not shard.cells:
                say(f"{shard.name}: nothing to train")
                continue
            process = _start(shard)
            running[shard.index] = (shard, process, time.monotonic())
            where = "" if shard.gpu is None else f" on GPU {shard.gpu}"
            say(
                f"{shard.name}: started{where}, {shard.cells} cells to train "
                f"(pid {process.pid}); log {shard.log}"
            )
        while running:
            for index, (shard, process, started) in list(running.items()):
                code = process.poll()
                if code is None:
                    continue
                del running[index]
                result = ShardResult(shard, code, time.monotonic() - started)
                results.append(result)
                say(
                    f"{shard.name}: {'done' if result.ok else 'FAILED'} ({_exit(code)}) after "
                    f"{_duration(result.seconds)}; log {shard.log}"
                )
            if running:
                time.sleep(poll_s)
    except BaseException:
        stop([process for _, process, _ in running.values()], settle_s=settle_s, grace_s=grace_s)
        raise
    return sorted(results, key=lambda r: r.shard.index)


def trained_as_done(outcomes: Sequence[CellOutcome], trained: Iterable[Path]) -> list[CellOutcome]:
    """The parent's outcomes after the shards ran: all "cached" when read back, so the cells
    the shards trained (`trained`: their folders) become "done", as a --jobs 1 run reports."""
    paths = set(trained)
    return [
        dataclasses.replace(o, status="done")
        if o.status == "cached" and o.planned.path in paths
        else o
        for o in outcomes
    ]


def stop(
    processes: Sequence[subprocess.Popen[bytes]], *, settle_s: float = 10.0, grace_s: float = 10.0
) -> None:
    """Stop children like a Ctrl-C stops a run: a terminal's Ctrl-C reaches them too (same
    process group), so first give them `settle_s` to finish their step, checkpoint it and exit
    130 by themselves; then send SIGINT (a second one stops a child at once, saving nothing
    half-written), then SIGTERM after `grace_s`, then SIGKILL. Another exception meanwhile (a
    second Ctrl-C) kills them at once."""
    try:
        _wait(processes, settle_s)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        _wait(processes, grace_s)
        for process in processes:
            if process.poll() is None:
                process.terminate()
        _wait(processes, 5.0)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def _start(shard: Shard) -> subprocess.Popen[bytes]:
    try:  # the shards share the folder: the first start finds a file there, before any runs
        shard.log.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise FlashprobeError(f"shard logs folder {shard.log.parent} is not a folder") from None
    # appended to: a rerun must not lose the log an earlier failure's message pointed to
    with shard.log.open("ab") as log:
        started = time.strftime("%Y-%m-%d %H:%M:%S %z")
        log.write(f"== {started}\n$ {shlex.join(shard.command)}\n".encode())
        log.flush()
        return subprocess.Popen(
            shard.command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_environment(shard.count, shard.gpu),
            preexec_fn=_death_signal(),
        )


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc with prctl (Linux only), loaded in the parent: a child between fork and exec must
    not load libraries."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc if hasattr(libc, "prctl") else None
    except OSError:
        return None


def _death_signal() -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to SIGTERM the child when this process ends."""
    libc, parent = _libc(), os.getpid()
    if libc is None:
        return None

    def arm() -> None:  # runs in the child, between fork and exec
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def watch_parent(poll_s: float = 1.0) -> None:
    """In a shard process (PARENT_ENV set by its parent): SIGTERM stops it at once, as a second
    Ctrl-C does (KeyboardInterrupt: the cell stays resumable), and a thread sends that SIGTERM
    when the parent is gone (its pid is no longer this process's parent). Elsewhere: nothing."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit() or threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _interrupt)
    if os.getppid() != int(parent):
        raise SystemExit(130)  # orphaned before it started
    threading.Thread(
        target=_watch, args=(int(parent), poll_s), name="flashprobe-parent-watch", daemon=True
    ).start()


def _watch(parent: int, poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    os.kill(os.getpid(), signal.SIGTERM)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def child_environment(count: int, gpu: str | None = None) -> dict[str, str]:
    """The parent's environment, unbuffered (the log follows the run), with `gpu` the only CUDA
    GPU it sees (when given) and, unless it sets OMP_NUM_THREADS, the CPU cores split between
    the `count` processes (as torchrun does): each taking every core slows all of them down
    several times."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    if "OMP_NUM_THREADS" not in env:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        env["OMP_NUM_THREADS"] = str(max(1, (cores or 1) // count))
    return env


def _wait(processes: Sequence[subprocess.Popen[bytes]], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return


def _exit(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit {code}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
