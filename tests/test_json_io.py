"""Strict JSON with flagged non-finite values: flashprobe.json_io."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from flashprobe import json_io


def strict(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict token {c}"))


def test_non_finite_values_are_null_plus_a_pointer_and_read_back() -> None:
    data = {
        "final_loss": math.nan,
        "ok": 1.5,
        "attention": {"1": {"max_logit": [2.0, math.inf, -math.inf]}},
        "a/b~c": [math.nan],
        "nested": [[1.0, math.nan]],
    }
    text = json_io.dumps(data, indent=1, sort_keys=True)
    raw = strict(text)
    assert raw["final_loss"] is None and raw["attention"]["1"]["max_logit"] == [2.0, None, None]
    assert raw["_nonfinite"] == {
        "/final_loss": "NaN",
        "/attention/1/max_logit/1": "Infinity",
        "/attention/1/max_logit/2": "-Infinity",
        "/a~1b~0c/0": "NaN",
        "/nested/0/1": "NaN",
    }
    back = json_io.loads(text)
    assert "_nonfinite" not in back and back["ok"] == 1.5
    assert math.isnan(back["final_loss"]) and math.isnan(back["a/b~c"][0])
    assert back["attention"]["1"]["max_logit"][1:] == [math.inf, -math.inf]
    assert math.isnan(back["nested"][0][1])


def test_finite_data_is_written_as_plain_json() -> None:
    data = {"loss": 2.5, "steps": [1, 2], "name": "x", "flag": True, "none": None}
    assert json_io.dumps(data) == json.dumps(data)


def test_numpy_and_torch_scalars_and_lists() -> None:
    data = {"a": np.float32("nan"), "b": torch.tensor(3.0), "c": (1, np.int64(2))}
    raw = strict(json_io.dumps(data))
    assert raw == {"a": None, "b": 3.0, "c": [1, 2], "_nonfinite": {"/a": "NaN"}}


def test_old_files_with_nan_tokens_and_bad_flags_still_read() -> None:
    assert math.isnan(json_io.loads('{"loss": NaN}')["loss"])
    odd = '{"x": 1, "y": null, "_nonfinite": {"/x": "NaN", "/missing/0": "NaN", "/y": "bogus"}}'
    assert json_io.loads(odd) == {"x": 1, "y": None}  # only a null the pointer names is set
    assert json_io.loads("[1, null]") == [1, None]


def test_has_type_reads_booleans_as_json_does() -> None:
    assert json_io.has_type(3, (int,)) and json_io.has_type(2.5, (int, float))
    assert not json_io.has_type(True, (int,)) and not json_io.has_type(False, (int, float))
    assert json_io.has_type(True, (bool,)) and not json_io.has_type("3", (int,))


@pytest.mark.parametrize("name", [[], {"a": 1}, 5, None, "nan"])
def test_a_damaged_nonfinite_flag_is_ignored_not_a_crash(name) -> None:
    text = json.dumps({"loss": None, "_nonfinite": {"/loss": name}})
    assert json_io.loads(text) == {"loss": None}
