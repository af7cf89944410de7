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


def _write_one_seed(root: str, raw: dict, seed: int) -> None:
    overrides = [f"seeds=[{seed}]"]
    suite = expand_suite(raw, overrides, validate=normalise_cell_config)
    write_suite_definition(ResultStore(root), suite, overrides)


def test_processes_writing_at_once_lose_no_seed(tmp_path, make_suite) -> None:
    """spread.sh on several GPUs starts its processes together: the read and the write of
    suite.json are one locked step, so every seed ends up in it."""
    import multiprocessing

    raw, seeds = make_suite(), list(range(6))
    write_suite_definition(ResultStore(tmp_path), expand_suite(raw, ["seeds=[9]"]), ["seeds=[9]"])
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        pool.starmap(_write_one_seed, [(str(tmp_path), raw, s) for s in seeds])
    stored = json.loads((tmp_path / "tiny" / "suite.json").read_text())
    assert stored["seeds"] == [*seeds, 9]
