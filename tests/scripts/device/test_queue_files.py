"""Every scripts/device/*.queue is valid before it reaches a GPU.

Each queue file runs through queue.sh itself, with stand-ins first on PATH: `python3`,
`python`, `torchrun` and `flashprobe` only record their arguments, `nvidia-smi` reports two
GPUs. So bash expands the lines as on the device (exports, functions such as the DDP queue's
`run_variant`, variables) and every line must end with exit code 0 (a syntax error or a missing
file shows there). The recorded calls are then checked on this machine:

- `flashprobe ablate ...`: run in-process with `--dry-run` and the store under tmp_path. The
  dry run validates the whole suite on any machine (unknown variants, bad --set keys, missing
  suites exit 2) and lists what only the target machine can check; the only such line allowed
  is the missing CUDA GPU.
- `flashprobe replay` / `report` / `bench`: parsed by the command's own parser (unknown
  options, extra arguments), `--variants-from` must name a suite; running them needs the
  trained store (bench: a GPU).
- `python3 -m pytest`: the test paths must exist (`-n` needs pytest-xdist, which the device
  image has and the test extra does not: not checked).
- `python3 -c CODE`: compiled, not run (the DDP queue's corpus build takes minutes).
- `python3 scripts/...`: the script must exist.
Any other call fails the test until a check for it is added here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from queue_harness import DEVICE, ROOT, DeviceQueue, make_queue, shim

from flashprobe.cli import main
from flashprobe.errors import FlashprobeError
from flashprobe.runner.data_check import NOT_BUILT

QUEUES = sorted(DEVICE.glob("*.queue"))
RECORDER = """#!{python} -S
import json, os, sys
with open(os.environ["QUEUE_CALLS"], "a") as calls:
    calls.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""
ALLOWED_ON_CPU = "train.device is cuda but this machine has no CUDA GPU"
NOT_CHECKED = "flashprobe: not checked here: "


@dataclass
class Recorded:
    lines: list[str]  # the queue file's command lines
    log: str
    calls: list[list[str]]  # program name, then its arguments


def start_recording(queue_file: Path, folder: Path) -> DeviceQueue:
    bin_dir = folder / "bin"
    for name in ("python3", "python", "torchrun", "flashprobe"):
        shim(bin_dir, name, RECORDER.format(python=sys.executable))
    shim(bin_dir, "nvidia-smi", "#!/bin/sh\nprintf '0\\n1\\n'\n")
    queue = make_queue(folder, bin_dir)
    queue.env["QUEUE_CALLS"] = str(folder / "calls.jsonl")
    queue.start(queue_file)
    return queue


def finish_recording(queue_file: Path, queue: DeviceQueue) -> Recorded:
    log = queue.wait_done()
    lines = [line for line in queue_file.read_text().splitlines() if line.strip()]
    calls_file = Path(queue.env["QUEUE_CALLS"])
    calls = calls_file.read_text().splitlines() if calls_file.exists() else []
    commands = [line for line in lines if not line.startswith("#")]
    return Recorded(commands, log, [json.loads(c) for c in calls])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Recorded]]:
    """Every queue file through queue.sh with the stand-ins, side by side."""
    queues = {q.name: start_recording(q, tmp_path_factory.mktemp(q.stem)) for q in QUEUES}
    try:
        yield {q.name: finish_recording(q, queues[q.name]) for q in QUEUES}
    finally:
        for queue in queues.values():
            queue.stop()


def failed_lines(run: Recorded) -> list[str]:
    return [line for line in run.lines if f"end (0): {line}\n" not in run.log]


# -- the checks of one recorded call ---------------------------------------------------------
RunCli = Callable[[list[str]], tuple[int, str, str]]


def flashprobe_args(call: list[str]) -> list[str] | None:
    """The arguments after `flashprobe` (also `python3 -m flashprobe` and torchrun's
    `-m flashprobe`), else None."""
    if call[0] == "flashprobe":
        return call[1:]
    for i in range(1, len(call) - 1):
        if call[i : i + 2] == ["-m", "flashprobe"]:
            return call[i + 2 :]
    return None


def check_ablate(args: list[str], store: Path, run_cli: RunCli) -> list[str]:
    args = [a for a in args if not a.startswith("--store=")]
    if "--store" in args:  # the store goes under tmp_path (a dry run writes nothing anyway)
        at = args.index("--store")
        del args[at : at + 2]
    code, out, err = run_cli([*args, "--dry-run", "--store", str(store), "--format", "json"])
    if code != 0:
        return [f"exit {code}: {err.strip()}"]
    allowed = [ALLOWED_ON_CPU, NOT_BUILT]  # a corpus a dry run does not build
    lines = err.splitlines()
    problems = [line.removeprefix(NOT_CHECKED) for line in lines if line.startswith(NOT_CHECKED)]
    errors = [f"not checked here: {p}" for p in problems if not p.startswith(tuple(allowed))]
    planned = {row["variant"] for row in json.loads(out)}
    asked = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--variant"}
    if not planned or not asked <= planned:
        errors.append(f"planned variants {sorted(planned)}, asked for {sorted(asked)}")
    if store.exists():
        errors.append(f"the dry run wrote {store}")
    return errors


def check_parsed(args: list[str]) -> list[str]:
    """replay and report: their own parser's verdict on the flags (nothing runs)."""
    from typer.main import get_command

    from flashprobe.cli import _register_commands, app
    from flashprobe.suites.bundled import find_suite

    _register_commands()
    name, rest = args[0], args[1:]
    try:
        params = get_command(app).commands[name].make_context(name, rest).params
        if params.get("variants_from"):
            find_suite(params["variants_from"])
    except FlashprobeError as exc:
        return [str(exc)]
    except Exception as exc:  # the parser's usage errors (typer may vendor click)
        if hasattr(exc, "format_message"):
            return [exc.format_message()]
        raise
    return []


def check_call(call: list[str], store: Path, run_cli: RunCli) -> list[str]:
    args = flashprobe_args(call)
    if args is not None:
        if args[:1] == ["ablate"]:
            return check_ablate(args, store, run_cli)
        if args[:1] in (["replay"], ["report"], ["bench"]):
            return check_parsed(args)
        return [f"no check for flashprobe {args[:1]}: add one to {Path(__file__).name}"]
    if call[1:3] == ["-m", "pytest"]:
        missing = [a for a in call[3:] if a.startswith("tests/") and not (ROOT / a).exists()]
        return [f"no such test path {a}" for a in missing]
    if len(call) > 1 and call[1].startswith("scripts/"):  # a repository script: it must exist
        return [] if (ROOT / call[1]).is_file() else [f"no such script {call[1]}"]
    if call[1:2] == ["-c"]:
        try:
            compile(call[2], "<queue line>", "exec")
        except SyntaxError as exc:
            return [f"python -c: {exc}"]
        return []
    return [f"no check for this call: add one to {Path(__file__).name}"]


def check_calls(calls: list[list[str]], tmp_path: Path, run_cli: RunCli) -> list[str]:
    errors = []
    for i, call in enumerate(calls):
        found = check_call(call, tmp_path / f"store-{i}", run_cli)
        errors += [f"{' '.join(call)}\n  -> {e}" for e in found]
    return errors


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> RunCli:
    """flashprobe's entry point in-process, from the repository root (where the queues run)."""
    monkeypatch.chdir(ROOT)

    def run(args: list[str]) -> tuple[int, str, str]:
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


# -- the tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("queue", [q.name for q in QUEUES])
def test_every_line_runs_under_queue_sh(recorded: dict[str, Recorded], queue: str) -> None:
    run = recorded[queue]
    assert run.lines and failed_lines(run) == [], run.log
    assert run.log.rstrip().endswith("queue done")


@pytest.mark.parametrize("queue", [q.name for q in QUEUES])
def test_every_call_is_valid_on_cpu(
    recorded: dict[str, Recorded], queue: str, tmp_path: Path, run_cli: RunCli
) -> None:
    calls = recorded[queue].calls
    assert any(flashprobe_args(c) for c in calls), calls  # the stand-ins saw the queue's work
    errors = check_calls(calls, tmp_path, run_cli)
    assert not errors, "\n".join(errors)


def test_the_checks_catch_broken_lines(tmp_path: Path, run_cli: RunCli) -> None:
    ablate = "python3 -m flashprobe ablate -c ablations/quick.yaml --no-replay --store /tmp/x"
    broken = [
        f"{ablate} --variant nope",  # an unknown variant
        f"{ablate} --set train.stepz=5",  # an unknown --set key
        ablate.replace("quick.yaml", "quik.yaml"),  # a missing suite
        "python3 -m flashprobe replay /tmp/x --suite quick --variants-from nope.yaml",
        "python3 -m flashprobe report /tmp/x --suit quick",  # an unknown flag
        "python3 -m pytest -q tests/kernel",  # a missing test path
        "echo (",  # a shell syntax error
    ]
    queue_file = tmp_path / "broken.queue"
    queue_file.write_text("\n".join(broken) + "\n")
    run = finish_recording(queue_file, start_recording(queue_file, tmp_path / "record"))
    assert failed_lines(run) == ["echo ("]
    errors = check_calls(run.calls, tmp_path, run_cli)
    assert len(errors) == len(run.calls) == len(broken) - 1, "\n".join(errors)
    for needle in ("'nope' is not in the suite", "unknown key train.stepz", "quik.yaml",
                   "nope.yaml", "No such option: --suit", "tests/kernel"):  # fmt: skip
        assert any(needle in e for e in errors), (needle, errors)
