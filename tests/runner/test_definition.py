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
