from __future__ import annotations

import re

from flashprobe.environment import environment, git_dirty, git_sha


def test_git_sha_inside_and_outside_a_checkout(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("FLASHPROBE_GIT_SHA", raising=False)
    assert re.fullmatch(r"[0-9a-f]{40}", git_sha() or "")  # tests run from a checkout
    assert git_sha(tmp_path) is None
    monkeypatch.setenv("FLASHPROBE_GIT_SHA", "abc123")  # a copied tree on a GPU machine
    assert git_sha(tmp_path) == "abc123"
    # The variable wins over a (possibly stale) .git that travelled with the tree.
    assert git_sha() == "abc123"
    assert git_dirty() is None


def test_environment_records_what_results_depend_on() -> None:
    env = environment("cpu", world_size=2)
    assert env["device"] == "cpu" and env["world_size"] == 2
    for key in ("flashprobe", "torch", "triton", "python", "cuda", "driver", "gpu", "git_sha",
                "git_dirty", "gpu_count", "cpu_count"):  # fmt: skip
        assert key in env
