"""suite.json: the suite as run, --set folded in, plans the same cells."""

from __future__ import annotations

import json

from runner_helpers import all_json_parses

from flashprobe.runner.definition import suite_definition, write_suite_definition
from flashprobe.store.result_store import ResultStore
from flashprobe.suites.cell_config import normalise_cell_config
from flashprobe.suites.suite import expand_suite


def test_suite_definition_folds_run_overrides_and_plans_the_same_cells(
    tmp_path, make_suite
) -> None:

    raw = make_suite(branch={"from": "fa2", "step": 4})
    raw["variants"]["sfa"]["train"] = {"steps": 12}  # --set train.steps beats the variant
    overrides = ["train.steps=8", "kernel.block_n=32", "seeds=[0,1]", "variants.sfa.kernel.beta=4"]
    suite = expand_suite(raw, overrides, validate=normalise_cell_config)
    written = write_suite_definition(ResultStore(tmp_path), suite, overrides)
    assert written == tmp_path / "tiny" / "suite.json"
    stored = json.loads(written.read_text())
    assert stored == json.loads(json.dumps(suite_definition(suite, overrides)))
    assert stored["seeds"] == [0, 1] and stored["variants"]["sfa"]["kernel"]["beta"] == 4
    again = expand_suite(stored, validate=normalise_cell_config)
    assert [(c.variant, c.seed, c.config) for c in again.cells] == [
        (c.variant, c.seed, c.config) for c in suite.cells
    ]
    assert all(c.config["train"]["steps"] == 8 for c in again.cells)
    assert suite_definition(suite) == dict(suite.raw)  # no run-config overrides: as loaded
    nameless = expand_suite({k: v for k, v in raw.items() if k != "name"}, default_name="stem")
    assert suite_definition(nameless)["name"] == "stem"
    all_json_parses(tmp_path)


def test_one_seed_per_process_adds_up_and_another_change_replaces(tmp_path, make_suite) -> None:
    """spread.sh runs each cell as `--set 'seeds=[K]'`: suite.json names every seed run."""
    store, raw = ResultStore(tmp_path), make_suite()
    for seed in (2, 0, 2):
        suite = expand_suite(raw, [f"seeds=[{seed}]"], validate=normalise_cell_config)
        path = write_suite_definition(store, suite, [f"seeds=[{seed}]"])
    assert json.loads(path.read_text())["seeds"] == [0, 2]
    changed = expand_suite(raw, ["seeds=[1]", "train.steps=8"], validate=normalise_cell_config)
    write_suite_definition(store, changed, ["seeds=[1]", "train.steps=8"])
    assert json.loads(path.read_text())["seeds"] == [1]  # not the same suite: replaced
    path.write_text("{broken")
    write_suite_definition(store, changed, ["seeds=[1]", "train.steps=8"])
    assert json.loads(path.read_text())["seeds"] == [1]  # an unreadable file is replaced


def test_writers_at_once_lose_no_seed(tmp_path, make_suite, monkeypatch) -> None:
    """spread.sh on several GPUs starts its processes together: the read and the write of
    suite.json are one locked step (flock on the suite folder, one open file each, as separate
    processes hold it), so every seed ends up in it. The read is slowed to force the race."""
    import threading
    import time

    from flashprobe.runner import definition

    read = definition._previous

    def slow_read(path):
        found = read(path)
        time.sleep(0.05)
        return found

    monkeypatch.setattr(definition, "_previous", slow_read)
    raw, seeds = make_suite(), list(range(6))
    suites = {s: expand_suite(raw, [f"seeds=[{s}]"]) for s in seeds}
    threads = [
        threading.Thread(target=write_suite_definition,
                         args=(ResultStore(tmp_path), suites[s], [f"seeds=[{s}]"]))
        for s in seeds
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert json.loads((tmp_path / "tiny" / "suite.json").read_text())["seeds"] == seeds
