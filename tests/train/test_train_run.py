"""train_run on tiny CPU models: determinism, resume, branching, checkpoints, divergence stops."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time

import pytest
import torch
from safetensors.torch import load_file

from flashprobe import json_io
from flashprobe.errors import FlashprobeError
from flashprobe.model import GPT
from flashprobe.train import run as run_module
from flashprobe.train import train_run
from flashprobe.train.checkpoint import load_weights, read_checkpoint
from flashprobe.train.metrics import read_jsonl
from flashprobe.train.run_state import INTERRUPTED, PHASES


def losses(run_dir) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl")}


def test_same_config_and_seed_give_identical_losses(tmp_path, make_config) -> None:
    config = make_config()
    first = train_run(config, tmp_path / "a")
    second = train_run(config, tmp_path / "b")
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert len(losses(tmp_path / "a")) == 12 and first.steps_done == 12
    assert first.final_loss == second.final_loss and first.min_loss <= first.final_loss
    other = make_config(train={"seed": 1})
    train_run(other, tmp_path / "c")
    assert losses(tmp_path / "c") != losses(tmp_path / "a")


def test_metrics_records_and_run_files(tmp_path, make_config) -> None:
    progress: list[dict] = []
    summary = train_run(make_config(), tmp_path / "run", progress=progress.append)
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in progress] == list(range(12))
    assert {"loss", "grad_norm", "lr", "tokens_per_s"} <= set(records[0])
    sixth = records[5]
    assert {"val_loss", "spectral", "attention"} <= set(sixth)
    assert len(sixth["spectral"]["wq_heads"]) == 2 and len(sixth["spectral"]["wq_heads"][0]) == 4
    assert len(sixth["attention"]["1"]["max_logit"]) == 4
    order = read_jsonl(tmp_path / "run" / "data_order.jsonl")
    assert [r["step"] for r in order] == list(range(12)) and len(order[0]["offsets"]) == 4
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved == summary.to_dict() and summary.tokens_per_s > 0
    assert summary.final_val_loss == records[-1]["val_loss"]
    # the token stream it trained on, as the run record names it (the runner reports it)
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert isinstance(summary.data_digest, str) and summary.data_digest == record["data_digest"]


def test_the_summary_says_where_the_wall_time_went(tmp_path, make_config, monkeypatch) -> None:
    slow_save = run_module.save_checkpoint

    def save(*args, **kwargs):  # a checkpoint as slow as one of GPT-2's, relative to the run
        time.sleep(0.3)
        return slow_save(*args, **kwargs)

    monkeypatch.setattr(run_module, "save_checkpoint", save)
    summary = train_run(make_config(train={"checkpoint_every": 4}), tmp_path / "run")
    phases = summary.time_by_phase_s
    assert list(phases) == list(PHASES)
    assert all(v > 0 for k, v in phases.items() if k not in ("capture", "other"))
    assert phases["capture"] == 0 and phases["other"] >= 0
    assert phases["checkpoint"] >= 0.9  # steps 4, 8 and 12 (the final one)
    assert sum(phases.values()) == pytest.approx(summary.wall_time_s, abs=0.01)
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["time_by_phase_s"] == phases
    bare = make_config(train={"checkpoint_final": False}, metrics={"eval_every": 0})
    quiet = train_run(bare, tmp_path / "quiet").time_by_phase_s
    assert quiet["checkpoint"] == 0 and quiet["eval"] == 0 and quiet["spectral"] > 0


def test_a_checkpoint_without_phase_times_still_resumes(tmp_path, make_config) -> None:
    constant = {"kind": "constant"}
    train_run(make_config(schedule=constant, train={"steps": 8}), tmp_path / "run")
    state_file = tmp_path / "run" / "checkpoints" / "step_0000008" / "state.json"
    state = json.loads(state_file.read_text())
    del state["run"]["phase_time_s"]  # as written before the phases were timed
    state_file.write_text(json.dumps(state))
    summary = train_run(make_config(schedule=constant), tmp_path / "run", resume=True)
    assert summary.steps_done == 12 and summary.time_by_phase_s["checkpoint"] > 0


class Interrupted(Exception):
    pass


def interrupt_after(step: int):
    def progress(record: dict) -> None:
        if record["step"] == step:
            raise Interrupted

    return progress


def test_resume_after_a_stop_gives_the_uninterrupted_losses(tmp_path, make_config) -> None:
    config = make_config(train={"checkpoint_every": 5})
    train_run(config, tmp_path / "whole")
    # Interrupted during step 7 (0-based 6); the last checkpoint holds 5 steps.
    with pytest.raises(Interrupted):
        train_run(config, tmp_path / "parts", progress=interrupt_after(6))
    assert read_checkpoint(tmp_path / "parts").step == 5
    with pytest.raises(FlashprobeError, match="already holds a run"):
        train_run(config, tmp_path / "parts")
    summary = train_run(config, tmp_path / "parts", resume=True)
    assert summary.steps_done == 12
    assert losses(tmp_path / "parts") == losses(tmp_path / "whole")
    order = read_jsonl(tmp_path / "parts" / "data_order.jsonl")
    assert [r["step"] for r in order] == list(range(12))


def sigint_during(step: int, times: int = 1):
    """A progress callback that sends this process SIGINT `times` times during `step`."""

    def progress(record: dict) -> None:
        if record["step"] == step:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)

    return progress


def test_ctrl_c_checkpoints_the_step_it_reached_and_resumes_exactly(tmp_path, make_config) -> None:
    config = make_config(train={"checkpoint_every": 5})
    train_run(config, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):  # during step 7 (0-based 6): finish it, save, stop
        train_run(config, tmp_path / "parts", progress=sigint_during(6))
    assert read_checkpoint(tmp_path / "parts").step == 7
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    summary = train_run(config, tmp_path / "parts", resume=True)
    assert summary.steps_done == 12
    assert losses(tmp_path / "parts") == losses(tmp_path / "whole")


def test_ctrl_c_during_the_last_step_lets_the_run_finish(tmp_path, make_config) -> None:
    summary = train_run(make_config(), tmp_path / "run", progress=sigint_during(11))
    assert summary.steps_done == 12 and (tmp_path / "run" / "summary.json").is_file()


def test_a_second_ctrl_c_stops_at_once(tmp_path, make_config) -> None:
    config = make_config(train={"checkpoint_every": 5})
    with pytest.raises(KeyboardInterrupt):
        train_run(config, tmp_path / "run", progress=sigint_during(6, times=2))
    assert read_checkpoint(tmp_path / "run").step == 5  # the step's checkpoint was not written


def test_a_cut_run_records_where_its_time_went_and_stays_unfinished(tmp_path, make_config) -> None:
    config = make_config(train={"checkpoint_every": 5})
    with pytest.raises(KeyboardInterrupt):  # during step 7 (0-based 6): finish it, save, stop
        train_run(config, tmp_path / "run", progress=sigint_during(6))
    assert not (tmp_path / "run" / "summary.json").exists()  # not finished
    record = json.loads((tmp_path / "run" / INTERRUPTED).read_text())
    assert record["steps_done"] == 7 and record["wall_time_s"] > 0
    phases = record["time_by_phase_s"]
    assert list(phases) == list(PHASES)
    assert phases["train"] > 0 and phases["eval"] > 0 and phases["checkpoint"] > 0
    assert sum(phases.values()) == pytest.approx(record["wall_time_s"], abs=0.01)
    summary = train_run(config, tmp_path / "run", resume=True)
    assert summary.steps_done == 12 and summary.wall_time_s >= record["wall_time_s"]
    assert not (tmp_path / "run" / INTERRUPTED).exists()  # finished after all


def test_a_run_stopped_at_once_records_too_a_failed_one_does_not(tmp_path, make_config) -> None:
    def stop_at_once(record: dict) -> None:  # a second Ctrl-C, a shard's SIGTERM
        if record["step"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_run(make_config(), tmp_path / "cut", progress=stop_at_once)
    record = json.loads((tmp_path / "cut" / INTERRUPTED).read_text())
    assert record["steps_done"] == 4 and record["time_by_phase_s"]["train"] > 0
    with pytest.raises(Interrupted):
        train_run(make_config(), tmp_path / "failed", progress=interrupt_after(3))
    assert not (tmp_path / "failed" / INTERRUPTED).exists()


def test_a_resumed_run_drops_the_record_of_the_cut_it_resumed_from(tmp_path, make_config) -> None:
    # The record describes the run as it stopped; a resumed run that then fails (or is killed
    # outright) must not leave it behind, naming steps and times the run has since passed.
    config = make_config(train={"checkpoint_every": 5})
    with pytest.raises(KeyboardInterrupt):
        train_run(config, tmp_path / "run", progress=sigint_during(6))
    assert json.loads((tmp_path / "run" / INTERRUPTED).read_text())["steps_done"] == 7
    with pytest.raises(Interrupted):
        train_run(config, tmp_path / "run", resume=True, progress=interrupt_after(9))
    assert not (tmp_path / "run" / INTERRUPTED).exists()
    with pytest.raises(KeyboardInterrupt):  # cut again: a fresh record of the whole run so far
        train_run(config, tmp_path / "run", resume=True, progress=sigint_during(8))
    assert json.loads((tmp_path / "run" / INTERRUPTED).read_text())["steps_done"] == 9


def test_a_record_that_cannot_be_written_does_not_replace_the_interrupt(
    tmp_path, make_config, monkeypatch
) -> None:
    write = run_module.write_text_atomic

    def disk_full(path, text):  # the interrupt record only: the checkpoint is still written
        if path.name == INTERRUPTED:
            raise OSError(28, "No space left on device")
        return write(path, text)

    monkeypatch.setattr(run_module, "write_text_atomic", disk_full)
    with pytest.raises(KeyboardInterrupt):
        train_run(make_config(train={"checkpoint_every": 5}), tmp_path / "run",
                  progress=sigint_during(6))  # fmt: skip
    assert not (tmp_path / "run" / INTERRUPTED).exists()
    assert read_checkpoint(tmp_path / "run").step == 7


def test_resume_can_extend_a_finished_run(tmp_path, make_config) -> None:
    constant = {"kind": "constant"}
    train_run(make_config(schedule=constant), tmp_path / "whole")
    train_run(make_config(schedule=constant, train={"steps": 8}), tmp_path / "parts")
    train_run(make_config(schedule=constant), tmp_path / "parts", resume=True)
    assert losses(tmp_path / "parts") == losses(tmp_path / "whole")


def test_resume_refuses_a_changed_config(tmp_path, make_config) -> None:
    train_run(make_config(train={"steps": 4}), tmp_path / "run")
    with pytest.raises(FlashprobeError, match=r"config key optimizer\.lr changed"):
        train_run(make_config(optimizer={"lr": 1e-3}), tmp_path / "run", resume=True)


def test_resume_refuses_a_changed_token_stream(tmp_path, make_config, monkeypatch) -> None:
    """The same config over another corpus (the interpreter's sources changed): not mixed."""
    import dataclasses

    from flashprobe.train import run as run_module

    train_run(make_config(train={"steps": 4}), tmp_path / "run")
    opened = run_module.open_dataset
    other = lambda config: dataclasses.replace(opened(config), digest="0" * 64)  # noqa: E731
    monkeypatch.setattr(run_module, "open_dataset", other)
    with pytest.raises(FlashprobeError, match=r"cannot resume .*: the data changed \(digest "):
        train_run(make_config(), tmp_path / "run", resume=True)
    # a changed data key changes the digest too: the key is named, not only the digest
    with pytest.raises(FlashprobeError, match=r"config key data\.max_bytes changed"):
        train_run(make_config(data={"max_bytes": 200_000}), tmp_path / "run", resume=True)


def test_branch_from_a_baseline_checkpoint_replays_its_data(tmp_path, make_config) -> None:
    baseline = make_config(train={"checkpoint_every": 6})
    train_run(baseline, tmp_path / "base")
    branch = make_config(model={"attention": "math"})
    summary = train_run(branch, tmp_path / "branch", start_from=tmp_path / "base" / "checkpoints"
                        / "step_0000006")  # fmt: skip
    assert summary.steps_done == 12
    base_order = read_jsonl(tmp_path / "base" / "data_order.jsonl")[6:]
    assert read_jsonl(tmp_path / "branch" / "data_order.jsonl") == base_order
    branch_losses = losses(tmp_path / "branch")
    assert sorted(branch_losses) == list(range(6, 12))
    # fp32 math vs bf16 SDPA: same data and weights, close but not identical losses.
    assert branch_losses[6] == pytest.approx(losses(tmp_path / "base")[6], rel=0.02)
    with pytest.raises(FlashprobeError, match=r"train\.seed differs"):
        train_run(make_config(train={"seed": 5}), tmp_path / "x", start_from=tmp_path / "base")


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("model.safetensors", "model.safetensors does not match its checksum"),
        ("optimizer.safetensors", "optimizer.safetensors does not match its checksum"),
    ],
)
def test_branching_from_a_damaged_checkpoint_names_it(tmp_path, make_config, damage, problem):
    # A cut copy of the source's checkpoint: one line naming the file, not safetensors' error.
    train_run(make_config(train={"checkpoint_every": 6}), tmp_path / "base")
    source = tmp_path / "base" / "checkpoints" / "step_0000006"
    blob = (source / damage).read_bytes()
    (source / damage).write_bytes(blob[: len(blob) // 2])
    message = f"cannot branch from {source}: {problem}"
    with pytest.raises(FlashprobeError, match=re.escape(message)):
        train_run(make_config(model={"attention": "math"}), tmp_path / "branch", start_from=source)
    assert not (tmp_path / "branch" / "metrics.jsonl").exists()


def test_checkpoint_round_trip_is_safetensors_and_json(tmp_path, make_config) -> None:
    config = make_config(train={"steps": 3}, optimizer={"name": "muon"})
    train_run(config, tmp_path / "run")
    checkpoint = read_checkpoint(tmp_path / "run")
    assert checkpoint.step == 3 and checkpoint.path.name == "step_0000003"
    assert sorted(p.name for p in checkpoint.path.iterdir()) == [
        "model.safetensors", "optimizer.safetensors", "state.json"
    ]  # fmt: skip
    optimizer_tensors = load_file(checkpoint.path / "optimizer.safetensors")
    assert any(k.endswith("momentum_buffer") for k in optimizer_tensors)
    model = GPT(config.model.with_vocab(256))
    load_weights(checkpoint, model)
    weights = load_file(checkpoint.path / "model.safetensors")
    (embedding,) = [
        w for k, w in weights.items() if k in ("transformer.wte.weight", "lm_head.weight")
    ]
    assert torch.equal(model.transformer.wte.weight, embedding)  # the tied matrix, stored once
    assert model.lm_head.weight is model.transformer.wte.weight
    state = json.loads((checkpoint.path / "state.json").read_text())
    assert state["step"] == 3 and state["seed"] == 0


def test_a_diverging_run_stops_and_records_the_step(tmp_path, make_config) -> None:
    config = make_config(
        optimizer={"lr": 5.0}, schedule={"warmup_steps": 0, "min_lr": 0.0},
        train={"steps": 40, "grad_clip": None},
        divergence={"rise_factor": 1.5, "min_step": 1},
    )  # fmt: skip
    summary = train_run(config, tmp_path / "run")
    assert summary.diverged and summary.divergence_rule in ("rise", "nonfinite")
    assert summary.steps_done == summary.diverged_step + 1 < 40
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert records[-1]["divergence"]["step"] == summary.diverged_step
    assert not math.isnan(summary.min_loss)


def test_a_compiled_model_trains_exactly_as_the_eager_one(tmp_path, make_config, monkeypatch):
    """train.compile with the Triton attention: same losses and attention stats; the step that
    records stats runs eagerly instead of recompiling. (aot_eager: what dynamo captures is what
    could go wrong; inductor would take minutes to build on CI's CPU.)"""
    compile = torch.compile

    def aot_eager(model, mode):  # type: ignore[no-untyped-def]
        assert mode == "default"
        return compile(model, backend="aot_eager")

    monkeypatch.setattr(torch, "compile", aot_eager)
    attention = {"impl": "flashprobe", "spec": "sfa", "backend": "triton"}

    def run(name: str, compile: bool) -> list[dict]:
        config = make_config(
            model={"attention": attention},
            train={"steps": 2, "batch_size": 2, "compile": compile},
            metrics={"attention_stats_every": 2, "eval_every": 0, "spectral_every": 0},
        )
        train_run(config, tmp_path / name)
        return read_jsonl(tmp_path / name / "metrics.jsonl")

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # earlier tests' graphs
    eager = run("eager", False)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 0
    compiled = run("compiled", True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert [r["loss"] for r in compiled] == [r["loss"] for r in eager]
    assert [r.get("attention") for r in compiled] == [r.get("attention") for r in eager]
    assert ["attention" in r for r in compiled] == [False, True]


def test_flashprobe_kernel_run_with_capture(tmp_path, make_config) -> None:
    pytest.importorskip("flashprobe.api")
    config = make_config(
        model={"attention": {"impl": "flashprobe", "spec": "paper-code"}},
        train={"steps": 3},
        metrics={"capture_layers": [1], "capture_steps": [1], "attention_stats_every": 1},
    )
    summary = train_run(config, tmp_path / "run")
    assert summary.steps_done == 3 and math.isfinite(summary.final_loss)
    tensors = load_file(tmp_path / "run" / "captures" / "step_0000001.safetensors")
    assert set(tensors) == {f"layer1.{n}" for n in ("x", "q", "k", "v", "o", "lse", "do")}
    assert tensors["layer1.q"].dtype == torch.bfloat16 and tensors["layer1.q"].shape[0] == 2
    assert tensors["layer1.x"].dtype == torch.bfloat16 and tensors["layer1.x"].shape[0] == 2
    stats = read_jsonl(tmp_path / "run" / "metrics.jsonl")[0]["attention"]["1"]
    assert all(v is not None for v in stats["p_bar_ones"])


def test_nan_attention_output_is_a_divergence_not_a_crash(tmp_path, make_config, monkeypatch):
    """A kernel whose output turns NaN mid-run (seen with paper-sfa on the H200) must end the run
    as diverged (rule nonfinite) with a strict-JSON checkpoint and summary, not an exception."""

    import flashprobe.model.attention as attention_module

    real = attention_module.flashprobe_attention()
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        calls["n"] += 1
        return out * float("nan") if calls["n"] > 10 else out

    monkeypatch.setattr(attention_module, "flashprobe_attention", lambda: poisoned)
    config = make_config(
        model={"attention": {"impl": "flashprobe", "backend": "emulator"}},
        train={"steps": 12, "checkpoint_every": 2},
        metrics={"attention_stats_every": 0},
    )
    summary = train_run(config, tmp_path / "run")
    assert summary.diverged and summary.divergence_rule == "nonfinite"
    assert summary.steps_done < 12
    state_files = list((tmp_path / "run" / "checkpoints").glob("step_*/state.json"))
    assert state_files
    written = [*(tmp_path / "run").rglob("*.json"), *(tmp_path / "run").rglob("*.jsonl")]
    for path in written:  # strict JSON everywhere: no NaN / Infinity tokens
        texts = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
        for text in texts:
            json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    # ... and the NaN is flagged, so it reads back as the NaN it was, not as "no value"
    raw = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert raw["final_loss"] is None and raw["_nonfinite"] == {"/final_loss": "NaN"}
    assert math.isnan(json_io.loads((tmp_path / "run" / "summary.json").read_text())["final_loss"])
    last = read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]
    assert math.isnan(last["loss"]) and last["divergence"]["rule"] == "nonfinite"


@pytest.mark.parametrize("deterministic", [True, False])
def test_deterministic_switch_sets_torch(tmp_path, make_config, deterministic) -> None:
    before = torch.are_deterministic_algorithms_enabled()
    try:
        train_run(make_config(train={"steps": 2, "deterministic": deterministic}), tmp_path)
        assert torch.are_deterministic_algorithms_enabled() is deterministic
        assert torch.is_deterministic_algorithms_warn_only_enabled() or not deterministic
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.mark.gpu
def test_same_config_and_seed_repeat_exactly_on_cuda(tmp_path, make_config) -> None:
    # train.deterministic (the default) must make two GPU runs of one config and seed agree to
    # the bit, as they do on CPU; the Triton kernels are deterministic by construction, the rest
    # of the step is PyTorch's. (SDPA's flash backward is not deterministic: not tested here.)
    attention = {"impl": "flashprobe", "backend": "triton"}
    config = make_config(model={"attention": attention}, train={"device": "cuda", "steps": 30})
    train_run(config, tmp_path / "a")
    train_run(config, tmp_path / "b")
    assert losses(tmp_path / "a") == losses(tmp_path / "b")


def test_resume_recomputes_what_a_damaged_log_line_hides(tmp_path, make_config) -> None:
    """A corrupt line mid metrics.jsonl: the resume goes back to the checkpoint before it and
    recomputes, so no step is missing and the losses are the uninterrupted run's."""
    config = make_config(train={"checkpoint_every": 4})
    train_run(config, tmp_path / "whole")
    with pytest.raises(Interrupted):
        train_run(config, tmp_path / "parts", progress=interrupt_after(9))  # checkpoint at 8
    path = tmp_path / "parts" / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[5] = "{garbage"
    path.write_text("\n".join(lines) + "\n")
    summary = train_run(config, tmp_path / "parts", resume=True)
    (note,) = summary.resume_notes
    assert note == "metrics.jsonl line 6 is damaged (steps from 5 are recomputed)"
    assert losses(tmp_path / "parts") == losses(tmp_path / "whole")
    assert [r["step"] for r in read_jsonl(path)] == list(range(12))


def _numbers(run_dir) -> list[dict]:
    """Every metrics record without its timings: what must repeat to the bit."""
    return [
        {k: v for k, v in r.items() if k not in ("tokens_per_s", "time_s")}
        for r in read_jsonl(run_dir / "metrics.jsonl")
    ]


def test_the_cpu_thread_count_is_pinned_by_the_config(tmp_path, make_config) -> None:
    """The run trains with train.cpu_threads whatever the process had (one core per --jobs
    process, every core alone): the same numbers, the count recorded, the process's own count
    restored afterwards, and a resume with another count refused."""
    quiet = {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 0}
    config = make_config(train={"steps": 3}, metrics=quiet)
    seen: list[int] = []

    def progress(record: dict) -> None:  # the count each step trains with
        seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    two = make_config(train={"steps": 3, "cpu_threads": 2}, metrics=quiet)
    try:
        for ambient in (1, 2, 3):
            torch.set_num_threads(ambient)
            train_run(config, tmp_path / f"ambient{ambient}", progress=progress)
            assert torch.get_num_threads() == ambient
        train_run(two, tmp_path / "two", progress=progress)
    finally:
        torch.set_num_threads(before)
    assert seen == [1] * 9 + [2] * 3
    assert _numbers(tmp_path / "ambient1") == _numbers(tmp_path / "ambient2")
    assert _numbers(tmp_path / "ambient1") == _numbers(tmp_path / "ambient3")
    saved = json.loads((tmp_path / "ambient2" / "config.json").read_text())
    assert saved["cpu_threads"] == 1 and saved["config"]["train"]["cpu_threads"] == 1
    with pytest.raises(FlashprobeError, match=r"config key train\.cpu_threads changed"):
        train_run(two, tmp_path / "ambient1", resume=True)
