"""DDP against one process with the same global batch: per-step losses and grad norms, the
gradient at the initial weights, the final weights and the gradient there.

The same comparison runs on CPU over gloo with two ranks (CI) and, marked `gpu`, over NCCL on
every visible GPU (`pytest -m gpu tests/train/test_distributed.py` on a multi-GPU host). Each
side is a subprocess running tests/train/ddp_worker.py: alone, or under torchrun.

Why the tolerances (bf16 autocast over fp32 master weights): every rank runs the same
micro-batches (same size and samples) as the lone process, so each micro-batch's forward and
backward are the same arithmetic, and the two sides differ only in the order the fp32 gradient
is summed (accumulation, then the all-reduce's mean over ranks). At the initial weights that is
fp32 rounding: GRAD0_RTOL. After an update, a weight one fp32 ulp apart can round to another
bf16 value in the autocast copy (a 2^-8 relative step), and the next forward carries that:
losses, updates and later gradients agree to a few bf16 roundings, LOSS_RTOL, UPDATE_RTOL and
GRAD_RTOL, far below what a wrong reduction gives (a missing mean over ranks doubles the
gradient; a rank that trains on the wrong samples, or on its share alone, changes it by O(1):
the control in `compare`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from flashprobe.errors import FlashprobeError
from flashprobe.train import TrainConfig
from flashprobe.train.distributed import MULTICAST_OFF, setup_distributed
from flashprobe.train.metrics import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("ddp_worker.py")

#: ‖g_ddp − g_one‖ / ‖g_one‖ per tensor at the initial weights: fp32 summation order only
#: (an n-term fp32 sum reordered moves by ≲ n·2^-24 ≈ 5e-7 for n = 8; 20× margin).
GRAD0_RTOL = 1e-5
#: |loss_ddp − loss_one| / loss_one at every step: one bf16 unit roundoff (2^-8).
LOSS_RTOL = 2**-8
#: The same for each step's pre-clip gradient norm: a few bf16 roundings (4 · 2^-8).
GRAD_NORM_RTOL = 2**-6
#: ‖Δw_ddp − Δw_one‖ / ‖Δw_one‖ over all weights, Δw = final − initial weights: a few bf16
#: roundings of the update direction.
UPDATE_RTOL = 2**-6
#: ‖g_ddp − g_one‖ / ‖g_one‖ over all weights at the final weights (each side's own).
GRAD_RTOL = 2**-5


def cpu_config() -> dict:
    return {
        "model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 32, "attention": "sdpa"},
        "data": {"max_bytes": 300_000},
        "optimizer": {"lr": 3e-3},
        "schedule": {"warmup_steps": 3, "min_lr": 1e-4},
        "train": {"steps": 8, "batch_size": 8, "micro_batch_size": 2, "precision": "bf16",
                  "device": "cpu"},
        "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 0},
    }  # fmt: skip


def gpu_config(world_size: int) -> dict:
    """A small GPT on the Triton kernels (the paper-scale suite's attention path); micro-batch 4,
    two micro-batches per rank (the lone process accumulates 2·world_size of them)."""
    return {
        "model": {"n_layer": 4, "n_head": 4, "n_embd": 256, "block_size": 256,
                  "attention": {"impl": "flashprobe", "spec": "fa2", "backend": "triton"}},
        "data": {"max_bytes": 4_000_000},
        "optimizer": {"lr": 1e-3},
        "schedule": {"warmup_steps": 5},
        "train": {"steps": 20, "batch_size": 8 * world_size, "micro_batch_size": 4,
                  "precision": "bf16", "device": "cuda"},
        "metrics": {"eval_every": 0, "spectral_every": 0, "attention_stats_every": 0},
    }  # fmt: skip


def launch(world_size: int, config: dict, out: Path, timeout: int) -> None:
    """Run the worker alone (world_size 1) or under torchrun; raise with its output on failure."""
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config))
    args = [str(WORKER), str(out / "config.json"), str(out)]
    if world_size > 1:
        args = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                str(world_size), *args]  # fmt: skip
    env = {
        **os.environ,
        **MULTICAST_OFF,  # NVLink multicast stays off on shared GPU hosts
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",  # torchrun's default per rank: the lone process does the same
    }
    done = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def relative(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """‖a − b‖ / ‖b‖ over all tensors together."""
    assert a.keys() == b.keys()
    diff = sum(float((a[k].double() - b[k].double()).square().sum()) for k in a)
    norm = sum(float(b[k].double().square().sum()) for k in b)
    return (diff / norm) ** 0.5


def batch_loss(path: Path) -> float:
    with safe_open(str(path), "pt") as f:
        return float(f.metadata()["loss"])


def compare(one: Path, ddp: Path, world_size: int, steps: int) -> dict[str, float]:
    """Assert the DDP run matches the lone one; return the measured errors (for the log)."""
    meta = json.loads((ddp / "run" / "config.json").read_text())
    assert meta["world_size"] == world_size  # really distributed, each rank on its share
    assert json.loads((one / "run" / "config.json").read_text())["world_size"] == 1
    errors: dict[str, float] = {}

    grad0_one, grad0_ddp = (
        load_file(one / "grad0.safetensors"),
        load_file(ddp / "grad0.safetensors"),
    )
    per_tensor = {k: relative({k: grad0_ddp[k]}, {k: grad0_one[k]}) for k in grad0_one}
    errors["grad0"] = max(per_tensor.values())
    assert errors["grad0"] <= GRAD0_RTOL, per_tensor
    # The control: rank 0's share alone (no all-reduce) lies outside every tolerance.
    errors["rank0_share_alone"] = relative(load_file(one / "half0.safetensors"), grad0_one)
    assert errors["rank0_share_alone"] > 2 * GRAD_RTOL
    assert batch_loss(ddp / "grad0.safetensors") == pytest.approx(
        batch_loss(one / "grad0.safetensors"), rel=GRAD0_RTOL
    )

    rows_one, rows_ddp = (
        read_jsonl(one / "run/metrics.jsonl"),
        read_jsonl(ddp / "run/metrics.jsonl"),
    )
    assert [r["step"] for r in rows_ddp] == [r["step"] for r in rows_one] == list(range(steps))
    for key, rtol in (("loss", LOSS_RTOL), ("grad_norm", GRAD_NORM_RTOL)):
        pairs = [(r[key], s[key]) for r, s in zip(rows_ddp, rows_one, strict=True)]
        errors[key] = max(abs(a - b) / abs(b) for a, b in pairs)
        assert errors[key] <= rtol, (key, pairs)
    assert rows_one[-1]["loss"] < rows_one[0]["loss"]  # it trained: the updates are not ~0

    initial = load_file(one / "init.safetensors")
    assert relative(load_file(ddp / "init.safetensors"), initial) == 0.0  # same seed, same start
    update_one = {k: w - initial[k] for k, w in load_file(one / "final.safetensors").items()}
    update_ddp = {k: w - initial[k] for k, w in load_file(ddp / "final.safetensors").items()}
    errors["update"] = relative(update_ddp, update_one)
    assert errors["update"] <= UPDATE_RTOL

    grad_one, grad_ddp = load_file(one / "gradT.safetensors"), load_file(ddp / "gradT.safetensors")
    errors["grad_final"] = relative(grad_ddp, grad_one)
    assert errors["grad_final"] <= GRAD_RTOL
    assert batch_loss(ddp / "gradT.safetensors") == pytest.approx(
        batch_loss(one / "gradT.safetensors"), rel=LOSS_RTOL
    )
    return errors


def test_gloo_ranks_match_one_process(tmp_path) -> None:
    config = cpu_config()
    launch(1, config, tmp_path / "one", timeout=120)
    launch(2, config, tmp_path / "ddp", timeout=120)
    errors = compare(tmp_path / "one", tmp_path / "ddp", 2, config["train"]["steps"])
    print("gloo, 2 ranks:", errors)


@pytest.mark.gpu
def test_nccl_ranks_match_one_gpu(tmp_path) -> None:
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"DDP over NCCL needs at least 2 CUDA GPUs; {count} visible")
    config = gpu_config(count)
    launch(1, config, tmp_path / "one", timeout=300)
    launch(count, config, tmp_path / "ddp", timeout=300)
    errors = compare(tmp_path / "one", tmp_path / "ddp", count, config["train"]["steps"])
    print(f"nccl, {count} ranks:", errors)


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_the_nccl_comparison_config_is_valid(world_size: int) -> None:
    """Checked here because its test cannot run on CPU: same micro-batch on both sides."""
    train = TrainConfig.from_dict(gpu_config(world_size)).train
    assert train.accumulation(world_size) == (4, 2)
    assert train.accumulation(1) == (4, 2 * world_size)


def test_nccl_is_set_up_with_nvlink_multicast_off(monkeypatch) -> None:
    """The variables are set before NCCL could read them, unless the environment sets them."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # stop before NCCL starts
    for name in MULTICAST_OFF:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NVSHMEM_DISABLE_NVLS", "0")  # a user's own choice stays
    with pytest.raises(FlashprobeError, match="needs CUDA GPUs"):
        setup_distributed("cuda")
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert os.environ["NVSHMEM_DISABLE_NVLS"] == "0"
