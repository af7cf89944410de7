"""`flashprobe ablate`: bad suites exit 2 with one line and write nothing; the smoke suite runs
end to end; finished cells are skipped; interrupted cells need --resume or --restart."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from tiny_suite import tiny_suite

from flashprobe.runner.plan import code_version
from flashprobe.train.metrics import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
TINY = tiny_suite(
    {
        "base": {
            "train": {"steps": 6, "checkpoint_every": 3},
            "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 0},
            "kernel": {"preset": "fa2"},
        },
        "variants": {"fa2": {}, "sfa": {"kernel": {"preset": "sfa"}}},
    }
)


def write(tmp_path: Path, raw, name: str = "suite.yaml") -> str:
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return str(path)


def one_line_error(result, needle: str) -> None:
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flashprobe: error: "), result.err
    assert needle in lines[0], lines[0]


def with_base(**sections):
    raw = json.loads(json.dumps(TINY))
    for name, values in sections.items():
        raw["base"][name] = {**raw["base"].get(name, {}), **values}
    return raw


@pytest.mark.parametrize(
    ("raw", "args", "needle"),
    [
        ("base: {train: [\n", (), "malformed YAML"),
        ("", (), "a suite must be a mapping (name, seeds, base, variants, ...), got an empty file"),
        (TINY, ("--set", "seeds=3"), "seeds must be a list of integers, got 3 (seed 3 alone"),
        ({**TINY, "failure": {"event": "logit-runaway", "layers": [9]}}, (), "layer 9 out of"),
        (with_base(capture={"layers": [5], "steps": [1]}), (), "capture.layers (metrics."),
        ({**TINY, "colour": 1}, (), "unknown suite key 'colour'"),
        (with_base(train={"stepz": 3}), (), "unknown key train.stepz"),
        ({**TINY, "variants": {"x": {"kernel": {"softmax": "fast"}}}}, (), "variant 'x': kernel:"),
        (with_base(train={"steps": "ten"}), (), "train.steps must be an integer"),
        (TINY, ("--set", "optimizer.lr=-1"), "optimizer.lr must be > 0"),
        (TINY, ("--set", "model.n_layer=1000000000"), "model.n_layer must be at most 1024"),
        (TINY, ("--set", "model.n_embd=2000000000"), "model.n_embd must be at most 65536"),
        (TINY, ("--set", "train.batch_size=100000000"), "train.batch_size must be in [1, 1048576]"),
        (TINY, ("--set", "train.cpu_threads=100000"), "train.cpu_threads must be in [1, 1024]"),
        (TINY, ("--set", "train.device=cuda"), "no CUDA GPU"),
        (TINY, ("--set", "model.attention.backend=triton"), "backend triton needs a CUDA GPU"),
        (with_base(data={"source": "bin", "path": "/nonexistent/owt"}), (), "data.path"),
        (TINY, ("--set", "nonsense"), "expected key=value"),
        (TINY, ("--format", "xml"), "--format must be one of"),
        (TINY, ("--variant", "nope"), "--variant 'nope' is not in the suite"),
        ({**TINY, "replay": {"bogus": 1}}, (), "unknown replay key 'bogus'"),
        ({**TINY, "failure": {"event": "spike"}}, (), "failure.event must be one of"),
        (TINY, ("--set", "failure.logit_limit=-5"), "failure.logit_limit must be > 0"),
        ({**TINY, "replay": {"baseline": "nope"}}, (), "replay.baseline: no variant 'nope'"),
        ({**TINY, "replay": {"backend": "triton"}}, (), "backend triton needs a CUDA GPU"),
        ({**TINY, "replay": {}}, ("--set", "replay.sources=some"), "replay.sources must be"),
        ({**TINY, "replay": {}}, ("--dry-run", "--set", "replay.safe=x"), "no variant 'x'"),
        (TINY, ("--shard", "2"), "--shard must be K/N, e.g. 0/3"),
        (TINY, ("--shard", "3/3"), "--shard 3/3: K must be below N"),
        (TINY, ("--shard", "0/0"), "--shard 0/0: N must be at least 1"),
        (TINY, ("--jobs", "0"), "'--jobs' / '-j'"),
        (TINY, ("--jobs", "2", "--shard", "0/2"), "give --shard or --jobs, not both"),
        (TINY, ("--jobs", "2", "--set", "optimizer.lr=-1"), "optimizer.lr must be > 0"),
    ],
)
def test_bad_suites_exit_2_and_write_nothing(tmp_path, run_cli, raw, args, needle) -> None:
    store = tmp_path / "store"
    result = run_cli("ablate", "--config", write(tmp_path, raw), "--store", str(store), *args)
    one_line_error(result, needle)
    assert not store.exists()


def test_missing_suite_file(tmp_path, run_cli) -> None:
    one_line_error(run_cli("ablate", "--config", str(tmp_path / "no.yaml")), "not found")


def test_gpt2_suite_needs_its_data_and_a_gpu(tmp_path, run_cli) -> None:
    suite, store = str(ROOT / "ablations" / "gpt2.yaml"), str(tmp_path / "store")
    cpu = ("--set", "train.device=cpu", "--set", "model.attention.backend=emulator")
    missing = run_cli("ablate", "-c", suite, "--store", store, *cpu)
    one_line_error(missing, "data.path data/openwebtext: no train.bin there")
    data = tmp_path / "owt"
    data.mkdir()
    for name in ("train.bin", "val.bin"):
        np.arange(4096, dtype=np.uint16).tofile(data / name)
    at = ("--set", f"data.path={data}")
    one_line_error(run_cli("ablate", "-c", suite, "--store", store, *at), "no CUDA GPU")
    plan = run_cli("ablate", "-c", suite, "--store", store, *at, *cpu, "--dry-run")
    assert plan.code == 0, plan.err
    for variant in ("paper-code", "fp32-attention", "flash-layer2-only", "delta-o-fp32", "sfa"):
        assert variant in plan.out
    assert "paper-code@4000" in plan.out and not Path(store).exists()


@pytest.mark.parametrize(
    "name",
    [
        "quick",
        "adamw-attribution",
        "adamw-controls",
        "adamw-6l-search",
        "muon-search",
        "muon-runaway",
        "muon-runaway-l-add",
        "muon-runaway-gqa",
        "muon-runaway-route",
        "gpu-smoke",
    ],
)
def test_one_gpu_suites_plan_on_cpu(tmp_path, run_cli, name: str) -> None:
    """The shipped CUDA suites are valid (sections, failure rule, replay roles) and refuse a CPU
    machine; planned with CPU overrides they list every variant and write nothing."""
    suite, store = str(ROOT / "ablations" / f"{name}.yaml"), tmp_path / "store"
    one_line_error(run_cli("ablate", "-c", suite, "--store", str(store)), "CUDA")
    cpu = ("--set", "train.device=cpu", "--set", "model.attention.backend=emulator",
           "--set", "replay.backend=emulator")  # fmt: skip
    plan = run_cli("ablate", "-c", suite, "--store", str(store), *cpu, "--dry-run")
    assert plan.code == 0, plan.err
    assert "paper-code" in plan.out or "fa2" in plan.out
    assert not store.exists()


@pytest.mark.parametrize("name", ["gpt2-pysource"])
def test_multi_gpu_suites_plan_on_cpu(tmp_path, run_cli, monkeypatch, name: str) -> None:
    """The shipped torchrun suites, as the one-GPU ones above; their global batch splits over 1,
    2, 4 and 8 ranks (the cells do not depend on the count) and is refused over 3."""
    suite, store = str(ROOT / "ablations" / f"{name}.yaml"), tmp_path / "store"
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    one_line_error(run_cli("ablate", "-c", suite, "--store", str(store)), "CUDA")
    cpu = ("--set", "train.device=cpu", "--set", "model.attention.backend=emulator")
    args = ("ablate", "-c", suite, "--store", str(store), *cpu, "--resume", "--dry-run")
    plans = []
    for world_size in (1, 2, 4, 8):
        monkeypatch.setenv("WORLD_SIZE", str(world_size))
        plan = run_cli(*args, "--format", "json")
        assert plan.code == 0, plan.err
        plans.append([(c["variant"], c["cell"], c["action"]) for c in json.loads(plan.out)])
    assert [v for v, _, _ in plans[0]] == ["paper-code", "fa2"]
    assert all(p == plans[0] for p in plans) and {a for _, _, a in plans[0]} == {"run"}
    monkeypatch.setenv("WORLD_SIZE", "3")
    dry = run_cli(*args)  # a dry run lists what only the target machine can check
    assert dry.code == 0 and "must be a multiple of the world size (3)" in dry.out, dry.err
    one_line_error(
        run_cli(*args[:-1]), "train.batch_size (512) must be a multiple of the world size (3)"
    )
    assert not store.exists()


def test_paper_scale_suite_keeps_the_papers_batch_and_schedule() -> None:
    from flashprobe.suites.suite import load_suite

    suite = load_suite(ROOT / "ablations" / "gpt2-pysource.yaml")
    assert suite.variants() == ["paper-code", "fa2"] and len(suite.cells) == 2
    config = suite.cells[0].config
    model, train = config["model"], config["train"]
    assert (model["n_layer"], model["n_head"], model["n_embd"]) == (12, 12, 768)
    assert train["batch_size"] * model["block_size"] == 524_288  # paper.md §1
    assert train["micro_batch_size"] == 32 and train["checkpoint_every"] <= 250
    assert (train["precision"], train["allow_tf32"], train["grad_clip"]) == ("bf16", False, 1.0)
    assert config["optimizer"] == {
        "name": "adamw", "lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.0,
    }  # fmt: skip
    assert config["schedule"] == {
        "kind": "cosine", "warmup_steps": 2000, "decay_steps": 600_000, "min_lr": 1e-5,
    }  # fmt: skip
    assert config["data"] == {"source": "pysource", "val_fraction": 0.01}


def test_interrupted_cells_need_resume_or_restart(tmp_path, run_cli) -> None:
    config, store = write(tmp_path, TINY), tmp_path / "store"
    first = run_cli("ablate", "-c", config, "--store", str(store), "--format", "json")
    assert first.code == 0, first.err
    # Simulate a kill mid-cell: a finished cell loses its summary (its run/ still has metrics).
    (cell,) = [p for p in (store / "tiny").iterdir() if p.name.startswith("sfa--")]
    (cell / "summary.json").unlink()
    one_line_error(run_cli("ablate", "-c", config, "--store", str(store)), "--resume")
    plan = run_cli("ablate", "-c", config, "--store", str(store), "--resume", "--dry-run")
    assert "resume from step 6" in plan.out and "skip" in plan.out
    resumed = run_cli("ablate", "-c", config, "--store", str(store), "--resume", "--format", "json")
    assert resumed.code == 0, resumed.err
    cells = json.loads(resumed.out)["cells"]
    assert [c["status"] for c in cells] == ["cached", "done"]
    assert cells[1]["summary"]["steps_trained"] == 0  # nothing after the final checkpoint
    assert cells[1]["final_loss"] == json.loads(first.out)["cells"][1]["final_loss"]


def test_smoke_suite_end_to_end(tmp_path, run_cli) -> None:
    suite, store = str(ROOT / "ablations" / "smoke.yaml"), tmp_path / "runs"
    result = run_cli("ablate", "--config", suite, "--store", str(store))
    assert result.code == 0, result.err
    cells = [p for p in (store / "smoke").iterdir() if p.is_dir()]
    summaries = [json.loads((p / "summary.json").read_text()) for p in cells]
    variants = {s["variant"] for s in summaries}
    assert variants == {"fa2", "sfa", "delta-o-fp32", "untiled", "fp32-attention"}
    assert len(summaries) == 10 and all(s["status"] == "done" for s in summaries)
    assert all(s["steps_done"] == 40 for s in summaries)
    for path in cells:
        assert (path / "environment.json").is_file() and (path / "config.json").is_file()
        assert list((path / "run" / "captures").glob("step_*.safetensors"))
    # Not a terminal: one line per finished cell, between progress lines every few steps.
    lines = [x for x in result.err.strip().splitlines() if ": step " not in x]
    assert len(lines) == 10 and lines[0].startswith("[1/10] fa2/seed0: done")
    assert "10 cells (10 run, 0 cached)" in result.out
    # the suite's replay: section: replayed on fa2's captures, one line says where
    replayed = f"-> {store / 'smoke' / 'replay.json'}; ranking: flashprobe report {store}"
    assert replayed in result.out and "(2 replayed)" in result.out
    suite_file = json.loads((store / "smoke" / "suite.json").read_text())
    assert suite_file["replay"] == {"baseline": "fa2", "backend": "auto"}
    for variant in variants:
        assert variant in result.out
    again = run_cli("ablate", "--config", suite, "--store", str(store), "--format", "csv")
    assert again.code == 0 and again.out.count(",cached,") == 10


def test_torchrun_ranks_share_the_work_and_rank_0_writes(tmp_path) -> None:
    import subprocess
    import sys

    raw = {**REPLAYED, "variants": {"fa2": {}}, "replay": {"backend": "emulator"}}
    config, store = write(tmp_path, raw), tmp_path / "store"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", "-m", "flashprobe", "ablate", "-c", config,
               "--store", str(store)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("1 cells (1 run, 0 cached)") == 1  # one table: rank 0's
    assert done.stdout.count("replay: 1 variants on the captures of 1 fa2 cells") == 1
    (cell,) = [p for p in (store / "tiny").iterdir() if p.is_dir()]
    assert sorted(p.name for p in (store / "tiny").iterdir() if p.is_file()) == [
        "replay.json",
        "suite.json",
    ]
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["environment"]["world_size"] == 2 and summary["steps_done"] == 6


REPLAYED = {
    **TINY,
    "base": {**TINY["base"], "capture": {"layers": [1], "steps": [4], "max_bytes": 100_000}},
    "replay": {"baseline": "fa2", "safe": "sfa", "backend": "emulator"},
}


def test_ablate_replays_when_the_suite_asks_and_report_ranks(tmp_path, run_cli) -> None:
    config, store = write(tmp_path, REPLAYED), tmp_path / "store"
    plan = run_cli("ablate", "-c", config, "--store", str(store), "--dry-run")
    assert plan.code == 0 and not store.exists()  # a dry run writes no suite.json either
    skipped = run_cli("ablate", "-c", config, "--store", str(store), "--no-replay")
    assert skipped.code == 0, skipped.err
    assert "\nreplay" not in skipped.out and not (store / "tiny" / "replay.json").exists()
    suite_file = json.loads((store / "tiny" / "suite.json").read_text())
    assert suite_file["replay"] == REPLAYED["replay"]

    result = run_cli("ablate", "-c", config, "--store", str(store), "--set", "train.steps=6")
    assert result.code == 0, result.err
    (line,) = [x for x in result.out.splitlines() if x.startswith("replay")]
    assert line == (
        f"replay: 2 variants on the captures of 1 fa2 cells (1 replayed) -> "
        f"{store / 'tiny' / 'replay.json'}; ranking: flashprobe report {store}"
    )
    progress = [x for x in result.err.strip().splitlines() if ": step " not in x]
    assert len(progress) == 2  # progress only: one line per cell (and step lines)
    assert json.loads((store / "tiny" / "suite.json").read_text())["base"]["train"]["steps"] == 6

    report = run_cli("report", str(store), "--format", "json")
    assert report.code == 0, report.err
    (suite,) = json.loads(report.out)
    assert suite["roles"]["baseline"] == "fa2" and suite["roles"]["safe"] == "sfa"
    assert not suite["roles"]["notes"]  # declared in suite.json, not inferred
    assert {r["variant"]: r["design"] for r in suite["ranking"]} == {
        "fa2": "baseline",
        "sfa": "safe",
    }
    assert suite["weight_gradient"] == "dW = dQᵀX"
    assert not any("layer input X" in n for n in suite["notes"])

    again = run_cli(
        "ablate", "-c", config, "--store", str(store), "--set", "train.steps=6", "--format", "json"
    )
    assert again.code == 0, again.err
    document = json.loads(again.out)
    assert document["replay"]["status"] == "cached"
    assert document["replay"]["file"] == str(store / "tiny" / "replay.json")
    csv = run_cli(
        "ablate", "-c", config, "--store", str(store), "--set", "train.steps=6", "--format", "csv"
    )
    assert csv.code == 0 and "\nreplay" not in csv.out and "\nreplay: " in csv.err


def test_a_later_replay_follows_the_suites_replay_section(tmp_path, run_cli) -> None:
    raw = {**REPLAYED, "replay": {"baseline": "sfa", "backend": "emulator"}}  # not fa2's default
    config, store = write(tmp_path, raw), tmp_path / "store"
    assert run_cli("ablate", "-c", config, "--store", str(store), "--no-replay").code == 0
    result = run_cli("replay", str(store))
    assert result.code == 0, result.err
    replayed = [line.split()[1] for line in result.out.splitlines() if "replayed" in line]
    assert replayed and all(cell.startswith("sfa--") for cell in replayed)
    roles = json.loads((store / "tiny" / "replay.json").read_text())["roles"]
    assert roles["baseline"] == "sfa"


def test_a_failed_replay_keeps_the_summary_and_exits_1(tmp_path, run_cli, monkeypatch) -> None:
    from flashprobe.attribution import replay

    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(replay, "replay_cells", broken)
    config, store = write(tmp_path, REPLAYED), tmp_path / "store"
    result = run_cli("ablate", "-c", config, "--store", str(store))
    assert result.code == 1
    assert "2 cells (2 run, 0 cached)" in result.out
    assert "replay failed: RuntimeError: kernel exploded" in result.err  # errors to stderr
    assert "replay failed" not in result.out
    assert all(json.loads((p / "summary.json").read_text())["status"] == "done"
               for p in (store / "tiny").iterdir() if p.is_dir())  # fmt: skip


# -- --shard and --jobs ---------------------------------------------------------------------------
def test_jobs_under_torchrun_exit_2(tmp_path, run_cli, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    store = tmp_path / "store"
    result = run_cli("ablate", "-c", write(tmp_path, TINY), "--store", str(store), "--jobs", "2")
    one_line_error(result, "--jobs does not combine with torchrun")
    assert not store.exists()


def test_a_shard_plans_its_groups_only(tmp_path, run_cli) -> None:
    raw = {**REPLAYED, "seeds": [0, 1, 2], "branch": {"from": "fa2", "step": 3}}
    args = ("ablate", "-c", write(tmp_path, raw), "--store", str(tmp_path / "s"), "--dry-run")
    plan = run_cli(*args, "--shard", "1/2", "--format", "json")
    assert plan.code == 0, plan.err
    # stdout is the one JSON document; the estimate goes to stderr, and nothing is unchecked
    assert plan.err.startswith("2 of 2 cells to train") and "not checked here" not in plan.err
    assert [(c["variant"], c["seed"]) for c in json.loads(plan.out)] == [("fa2", 1), ("sfa", 1)]
    other = json.loads(run_cli(*args, "--shard", "0/2", "--format", "json").out)
    assert [(c["variant"], c["seed"]) for c in other] == [
        (v, s) for s in (0, 2) for v in REPLAYED["variants"]
    ]


def test_jobs_train_the_same_cells_as_one_process(tmp_path, run_cli) -> None:
    raw = {**REPLAYED, "seeds": [0, 1], "branch": {"from": "fa2", "step": 3}}
    config = write(tmp_path, raw)
    one = run_cli("ablate", "-c", config, "--store", str(tmp_path / "one"), "--format", "json")
    two = run_cli(
        "ablate", "-c", config, "--store", str(tmp_path / "two"), "--format", "json", "--jobs", "2"
    )
    assert one.code == 0 and two.code == 0, two.err
    logs = tmp_path / "two" / "tiny" / "logs"
    lines = two.err.splitlines()  # one line per shard process as it starts and as it ends
    for k in (0, 1):
        mine = [x for x in lines if x.startswith(f"shard {k}/2: ")]
        assert [x.split(",")[0].split(" (")[0] for x in mine] == [
            f"shard {k}/2: started",
            f"shard {k}/2: done",
        ]
        assert all(x.endswith(f"; log {logs / f'shard-{k}-of-2.log'}") for x in mine)
        assert "(exit 0)" in mine[1]
    assert len(lines) == 4
    first, second = json.loads(one.out), json.loads(two.out)

    def cells(document):
        keys = ("variant", "seed", "status", "final_loss", "min_loss", "step", "cell")
        return [{k: c[k] for k in keys} for c in document["cells"]]

    assert cells(second) == cells(first)  # same keys and losses, all "done" (not "cached")
    assert [c["status"] for c in second["cells"]] == ["done"] * 4
    assert [(c["variant"], c["seed"]) for c in second["cells"]] == [
        ("fa2", 0), ("sfa", 0), ("fa2", 1), ("sfa", 1),
    ]  # fmt: skip
    for name in (c["cell"] for c in second["cells"]):
        summary = json.loads((tmp_path / "two" / "tiny" / name / "summary.json").read_text())
        assert summary["status"] == "done" and summary["steps_done"] == 6
    assert (tmp_path / "two" / "tiny" / "suite.json").read_text() == (
        tmp_path / "one" / "tiny" / "suite.json"
    ).read_text()  # the shards rewrote the same suite.json, not their part of it
    # the replay ran once, in the parent, on every cell
    assert second["replay"]["status"] == "replayed"
    assert second["replay"]["message"] == first["replay"]["message"]
    assert "on the captures of 2 fa2 cells" in second["replay"]["message"]
    shard_log = (logs / "shard-1-of-2.log").read_text()
    assert "--shard 1/2 --no-replay --format json" in shard_log.splitlines()[1]  # under its date
    assert "[2/2] sfa/seed1: done" in shard_log
    again = run_cli("ablate", "-c", config, "--store", str(tmp_path / "two"), "--jobs", "2")
    assert again.code == 0 and "4 cells (0 run, 4 cached)" in again.out
    assert "shard" not in again.err  # nothing to train: no processes


def test_a_failed_shard_process_makes_the_run_exit_1(tmp_path, run_cli) -> None:
    raw = {**TINY, "seeds": [0, 1], "variants": {"fa2": {}}}
    config, store = write(tmp_path, raw), tmp_path / "store"
    plan = run_cli("ablate", "-c", config, "--store", str(store), "--dry-run", "--format", "json")
    seed0, seed1 = (c["cell"] for c in json.loads(plan.out))
    (store / "tiny").mkdir(parents=True)
    (store / "tiny" / seed1).write_text("")  # a file where shard 1's cell folder should go
    result = run_cli("ablate", "-c", config, "--store", str(store), "--jobs", "2")
    assert result.code == 1, result.err
    log = store / "tiny" / "logs" / "shard-1-of-2.log"
    assert "shard 1/2: FAILED (exit 1) after" in result.err
    assert f"1 of 2 shard processes failed (shard 1/2); see {log};" in result.err
    assert f"flashprobe: error: File exists: {store / 'tiny' / seed1}" in log.read_text()
    assert result.out == ""  # no table: the cells are not all done
    summary = json.loads((store / "tiny" / seed0 / "summary.json").read_text())
    assert summary["status"] == "done"  # the other shard finished its cell


def test_jobs_refuse_to_train_what_the_shards_left(tmp_path, run_cli, monkeypatch) -> None:
    from flashprobe.runner import plan

    # the shard processes see another code version (a commit landed meanwhile): other cells
    monkeypatch.setattr(plan, "code_version", lambda: "before-the-commit")
    raw = {**TINY, "variants": {"fa2": {}}}
    config, store = write(tmp_path, raw), tmp_path / "store"
    result = run_cli("ablate", "-c", config, "--store", str(store), "--jobs", "2")
    assert result.code == 1 and result.out == ""
    assert "shard 0/2: done (exit 0)" in result.err and "shard 1/2: nothing to train" in result.err
    assert result.err.strip().splitlines()[-1] == (
        "flashprobe: the shard processes left 1 of 1 cells unfinished (fa2/seed0 first); "
        "did the suite file or the git commit change meanwhile?"
    )


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (bytes(range(256)), "is not UTF-8 text"),
        ("name: caf\xe9\n".encode("latin-1"), "is not UTF-8 text (byte 9)"),
        (b"name: x\nname: y\nbase: {}\n", "duplicate key 'name' (line 2)"),
        (b"name: ../escape\nbase: {train: {steps: 1}}\n", "suite name '../escape'"),
        (b"name: " + b"n" * 300 + b"\n", "at most 64"),
    ],
)
def test_unreadable_suite_files_exit_2(tmp_path, run_cli, content: bytes, needle: str) -> None:
    path = tmp_path / "suite.yaml"
    path.write_bytes(content)
    store = tmp_path / "store"
    one_line_error(run_cli("ablate", "-c", str(path), "--store", str(store)), needle)
    assert not store.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"]


def test_a_store_that_is_a_file_or_under_one_exits_2(tmp_path, run_cli) -> None:
    config, blocker = write(tmp_path, TINY), tmp_path / "file"
    blocker.write_text("keep me")
    for store in (blocker, blocker / "sub"):
        for extra in ((), ("--dry-run",), ("--jobs", "2")):
            result = run_cli("ablate", "-c", config, "--store", str(store), *extra)
            one_line_error(result, f"--store {store}")
    assert blocker.read_text() == "keep me"
    long_name = tmp_path / ("x" * 300)
    one_line_error(run_cli("ablate", "-c", config, "--store", str(long_name)), "--store")


def test_hand_edited_cell_files_are_one_line_errors_and_stay_as_they_are(tmp_path, run_cli) -> None:
    config, store = write(tmp_path, TINY), tmp_path / "store"
    assert run_cli("ablate", "-c", config, "--store", str(store), "--variant", "fa2").code == 0
    (cell,) = (store / "tiny").glob("fa2--*")
    for name, edit in [
        ("cell.json", lambda d: {**d, "seed": "zero"}),
        ("cell.json", lambda d: {**d, "point": 5}),
        ("cell.json", lambda d: [d]),
        ("config.json", lambda d: {**d, "train": [1, 2]}),
        ("summary.json", lambda d: "done"),
    ]:
        path = cell / name
        original = path.read_bytes()
        path.write_text(json.dumps(edit(json.loads(original))))
        before = _tree(store)
        for args in (("report", str(store)), ("ablate", "-c", config, "--store", str(store))):
            one_line_error(run_cli(*args), f"corrupt cell file {path}")
        assert _tree(store) == before
        path.write_bytes(original)
    (cell / "cell.json").write_bytes(b"\xff\xfe{")
    one_line_error(run_cli("report", str(store)), "not UTF-8")


def test_two_processes_on_one_cell_never_train_it_twice(tmp_path, run_cli) -> None:
    """A second `ablate` on the same store, plain, with --resume or with --restart, leaves the
    cell the first process trains alone (one line names the holder; exit 1), deletes none of
    its output, and once the first is done finds the cell finished: every step logged once."""
    raw = {**TINY, "variants": {"fa2": {}}}
    raw["base"] = {**TINY["base"], "train": {**TINY["base"]["train"], "steps": 12}}
    config, store = write(tmp_path, raw), tmp_path / "store"
    plan = run_cli("ablate", "-c", config, "--store", str(store), "--dry-run", "--format", "json")
    cell = store / "tiny" / json.loads(plan.out)[0]["cell"]
    metrics = cell / "run" / "metrics.jsonl"
    command = [sys.executable, "-m", "flashprobe", "ablate", "-c", config, "--store", str(store)]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (metrics.is_file() and metrics.read_bytes().count(b"\n") >= 2):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)  # frozen mid-run, holding the cell
        before = {p: p.read_bytes() for p in cell.rglob("*") if p.is_file() and p.name != ".lock"}
        for flags in ((), ("--resume",), ("--restart",)):
            second = run_cli("ablate", "-c", config, "--store", str(store), *flags)
            assert second.code == 1, second.err
            line = f"fa2/seed0: not run: busy: another process is writing it (pid {first.pid} on "
            assert line in second.out
        after = {p: p.read_bytes() for p in cell.rglob("*") if p.is_file() and p.name != ".lock"}
        assert after == before
    finally:
        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert [r["step"] for r in read_jsonl(metrics)] == list(range(12))
    third = run_cli("ablate", "-c", config, "--store", str(store), "--format", "json")
    assert third.code == 0 and [c["status"] for c in json.loads(third.out)["cells"]] == ["cached"]


def _sensitive_suite() -> dict:
    """One cell whose CPU sums split differently over 1 and 2 threads (on the 2-core CI machine
    its numbers part at step 4 when the threads are not pinned), checkpointed every 2 steps."""
    raw = json.loads(json.dumps({**TINY, "variants": {"fa2": {}}}))
    base = raw["base"]
    base["model"]["block_size"] = 64
    base["optimizer"] = {"lr": 3e-3}
    base["train"].update(steps=10, batch_size=8, checkpoint_every=2)
    base["metrics"] = {"eval_every": 5, "eval_batches": 1, "spectral_every": 5,
                       "attention_stats_every": 5}  # fmt: skip
    return raw


def _run_numbers(store: Path) -> tuple[list[dict], dict, bytes]:
    """(metrics records without timings, the summary's numbers, the final weights)."""
    (cell,) = (store / "tiny").glob("fa2--*")
    records = [
        {k: v for k, v in r.items() if k not in ("tokens_per_s", "time_s")}
        for r in read_jsonl(cell / "run" / "metrics.jsonl")
    ]
    summary = json.loads((cell / "summary.json").read_text())
    keys = ("steps_done", "final_loss", "min_loss", "final_val_loss", "diverged", "key")
    weights = (cell / "run" / "checkpoints" / "step_0000010" / "model.safetensors").read_bytes()
    return records, {k: summary[k] for k in keys}, weights


def test_a_kill_at_a_random_step_resumes_bit_identically(tmp_path, run_cli) -> None:
    """kill -9 at a random moment of a one-thread shard-like process, then --resume here (every
    core), and an interruption here resumed in a one-thread process: both give the metrics,
    summary and final weights of an uninterrupted run, to the bit."""
    from flashprobe.runner.plan import plan_suite
    from flashprobe.runner.prepare import prepare_suite
    from flashprobe.runner.training import SuiteEvents, run_plan
    from flashprobe.store.result_store import ResultStore

    config = write(tmp_path, _sensitive_suite())
    command = [sys.executable, "-m", "flashprobe", "ablate", "-c", config, "--format", "json"]
    one_thread = {**os.environ, "OMP_NUM_THREADS": "1"}  # what a --jobs process gets
    whole = run_cli("ablate", "-c", config, "--store", str(tmp_path / "whole"))
    assert whole.code == 0, whole.err
    expected = _run_numbers(tmp_path / "whole")
    rng = random.Random()
    lines = rng.randrange(1, 10)  # killed once this many steps are logged (mid-step after)

    store = tmp_path / "killed"
    child = subprocess.Popen([*command, "--store", str(store)], env=one_thread)
    deadline = time.monotonic() + 120
    metrics = None
    while metrics is None or metrics.read_bytes().count(b"\n") < lines:
        assert child.poll() is None and time.monotonic() < deadline, f"finished before {lines}"
        metrics = next((store / "tiny").glob("fa2--*/run/metrics.jsonl"), None)
        time.sleep(0.002)
    child.send_signal(signal.SIGKILL)
    child.wait()
    resumed = run_cli("ablate", "-c", config, "--store", str(store), "--resume")
    assert resumed.code == 0, (lines, resumed.err)
    assert _run_numbers(store) == expected, f"killed after {lines} logged steps"

    class Crash(SuiteEvents):  # a failure in this process at a random step
        def step(self, record) -> None:
            if record["step"] == lines:
                raise KeyboardInterrupt

    store = tmp_path / "crashed"
    plan = plan_suite(prepare_suite(config), ResultStore(store), version=code_version())
    with pytest.raises(KeyboardInterrupt):
        run_plan(plan, ResultStore(store), version=code_version(), events=Crash())
    finish = subprocess.run(
        [*command, "--store", str(store), "--resume"], env=one_thread, capture_output=True
    )
    assert finish.returncode == 0, finish.stderr.decode()
    assert _run_numbers(store) == expected, f"interrupted at step {lines}"


def test_a_read_only_store_exits_2_before_writing(tmp_path, run_cli, monkeypatch) -> None:
    """A read-only file system (or folder) as --store: one line, nothing written. (Simulated:
    the tests may run as root, which writes anywhere.)"""
    from flashprobe.store import result_store as store_module

    config, store = write(tmp_path, TINY), tmp_path / "store"
    store.mkdir()
    real = store_module.os.access

    def access(path, mode: int) -> bool:  # no writing in the store
        return not (Path(path) == store and mode & os.W_OK) and real(path, mode)

    monkeypatch.setattr(store_module.os, "access", access)
    one_line_error(run_cli("ablate", "-c", config, "--store", str(store)), "is not writable")
    assert list(store.iterdir()) == []


def test_a_file_where_the_suite_folder_goes_exits_2(tmp_path, run_cli) -> None:
    config, store = write(tmp_path, TINY), tmp_path / "store"
    store.mkdir()
    (store / "tiny").write_text("keep")
    one_line_error(run_cli("ablate", "-c", config, "--store", str(store)), "is not a folder")
    assert (store / "tiny").read_text() == "keep"
    one_line_error(run_cli("ablate", "-c", "/dev/null"), "not a regular file")


def test_a_folder_where_the_suite_file_goes_exits_2_before_training(tmp_path, run_cli) -> None:
    config, store = write(tmp_path, TINY), tmp_path / "store"
    (store / "tiny" / "suite.json" / "kept").mkdir(parents=True)
    result = run_cli("ablate", "-c", config, "--store", str(store))
    one_line_error(result, f"{store / 'tiny' / 'suite.json'} is a folder, not a file")
    left = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
    assert left == ["tiny", "tiny/suite.json", "tiny/suite.json/kept"]  # no cell, no temp file


def test_report_before_the_safe_variant_has_run_keeps_the_add_design(tmp_path, run_cli) -> None:
    """replay.safe declared but not run yet (a device session runs variants in turn): the add
    variant is still an add of one component, unjudged, not a restore of many."""
    raw = {**TINY, "replay": {"baseline": "paper-code", "safe": "fa2"},
           "variants": {"paper-code": {"kernel": {"preset": "paper-code"}}, "fa2": {},
                        "fa2-score-bf16": {"kernel": {"score_precision": "bf16"}}}}  # fmt: skip
    config, store = write(tmp_path, raw), tmp_path / "store"
    for variant in ("paper-code", "fa2-score-bf16"):
        ran = run_cli("ablate", "-c", config, "--store", str(store), "--variant", variant)
        assert ran.code == 0, ran.err
    report = run_cli("report", str(store), "--format", "json")
    assert report.code == 0, report.err
    (suite,) = json.loads(report.out)
    rows = {r["variant"]: r for r in suite["ranking"]}
    assert suite["roles"]["safe"] == "fa2" and "fa2" not in rows
    add = rows["fa2-score-bf16"]
    assert (add["design"], add["component"], add["rank"]) == ("add", "score_precision=bf16", None)
    assert "not judged" in add["verdict"]


def test_an_empty_config_argument_is_named(run_cli) -> None:
    one_line_error(run_cli("ablate", "--config", "", "--dry-run"), "--config is empty")


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("data.max_bytes=10", "variant 'fa2': data: stdlib corpus too small for a validation "
         "split (1 files); raise data.max_bytes"),
        ("model.block_size=100000", "variant 'fa2': model.block_size 100000 needs a training "
         "split of at least 100002 tokens"),
    ],
)  # fmt: skip
def test_impossible_data_settings_exit_2_and_leave_the_store_as_it_was(
    tmp_path, run_cli, setting: str, needle: str
) -> None:
    """A data cap too small to split, a block longer than the training split: refused before
    anything is written (no cell folder, suite.json of the earlier run untouched), in a dry run
    too, where the stdlib corpus is cheap to build."""
    config, store = write(tmp_path, TINY), tmp_path / "store"
    assert run_cli("ablate", "-c", config, "--store", str(store)).code == 0
    before = _tree(store)
    for extra in ((), ("--dry-run",), ("--jobs", "2")):
        result = run_cli("ablate", "-c", config, "--store", str(store), "--set", setting, *extra)
        one_line_error(result, needle)
        assert "Traceback" not in result.err and result.out == ""
        assert _tree(store) == before


def test_an_interrupted_check_keeps_the_earlier_suite_file(tmp_path, run_cli, monkeypatch) -> None:
    """Ctrl-C while the data is prepared (a pysource corpus takes minutes): nothing written."""
    from flashprobe.runner import data_check

    config, store = write(tmp_path, TINY), tmp_path / "store"
    assert run_cli("ablate", "-c", config, "--store", str(store)).code == 0
    before = _tree(store)

    def interrupted(_data):
        raise KeyboardInterrupt

    monkeypatch.setattr(data_check, "open_dataset", interrupted)
    result = run_cli("ablate", "-c", config, "--store", str(store), "--set", "train.steps=8")
    assert result.code == 130 and "Traceback" not in result.err
    assert _tree(store) == before
