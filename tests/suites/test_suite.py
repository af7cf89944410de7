from __future__ import annotations

import re

import pytest

from flashprobe.errors import FlashprobeError
from flashprobe.suites.suite import cell_key, deep_merge, expand_suite, load_suite

RAW = {
    "name": "demo",
    "seeds": [0, 1],
    "base": {"train": {"lr": 1e-3, "steps": 10}, "kernel": {"preset": "fa2"}},
    "variants": {"baseline": {}, "sfa": {"kernel": {"preset": "sfa"}}},
    "axes": {"train.lr": [1e-3, 2e-3]},
    "branch": {"from": "baseline", "step": 5},
}


def test_grid_expands_variants_axes_and_seeds() -> None:
    suite = expand_suite(RAW)
    assert len(suite.cells) == 2 * 2 * 2
    assert suite.variants() == ["baseline", "sfa"]
    lrs = {(c.variant, c.config["train"]["lr"], c.seed) for c in suite.cells}
    assert len(lrs) == 8
    sfa = [c for c in suite.cells if c.variant == "sfa"]
    assert all(c.config["kernel"]["preset"] == "sfa" for c in sfa)
    assert all(c.config["train"]["steps"] == 10 for c in suite.cells)  # base survives merge


def test_list_valued_axis_points_are_hashable_and_reach_the_config() -> None:
    raw = {**RAW, "axes": {"optimizer.betas": [[0.9, 0.95], [0.9, 0.99]]}}
    suite = expand_suite(raw)
    points = {c.point for c in suite.cells}
    assert points == {(("optimizer.betas", (0.9, 0.95)),), (("optimizer.betas", (0.9, 0.99)),)}
    assert {tuple(c.config["optimizer"]["betas"]) for c in suite.cells} == {
        (0.9, 0.95),
        (0.9, 0.99),
    }
    assert len({c.group for c in suite.cells}) == 2 * 2  # points × seeds


def test_branch_applies_to_variants_not_the_source() -> None:
    suite = expand_suite(RAW)
    for cell in suite.cells:
        if cell.variant == "baseline":
            assert cell.branch_from is None
        else:
            assert (cell.branch_from, cell.branch_step) == ("baseline", 5)


def test_cli_overrides_reach_the_base() -> None:
    suite = expand_suite(RAW, overrides=["train.steps=3", "kernel.beta=4"])
    assert {c.config["train"]["steps"] for c in suite.cells} == {3}
    assert {c.config["kernel"]["beta"] for c in suite.cells} == {4}


def test_cell_key_depends_on_config_and_code() -> None:
    a, b = expand_suite(RAW).cells[:2]
    assert cell_key(a, "v1") != cell_key(b, "v1")
    assert cell_key(a, "v1") != cell_key(a, "v2")
    assert cell_key(a, "v1") == cell_key(expand_suite(RAW).cells[0], "v1")


def test_validator_runs_on_every_cell_before_anything() -> None:
    seen = []

    def validate(config):
        seen.append(config)
        if config["kernel"].get("preset") == "sfa":
            raise FlashprobeError("bad preset")

    with pytest.raises(FlashprobeError, match="variant 'sfa': bad preset"):
        expand_suite(RAW, validate=validate)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({**RAW, "colour": 1}, "unknown suite key 'colour'"),
        ({**RAW, "seeds": [0, 0]}, "seeds repeat"),
        ({**RAW, "seeds": ["a"]}, "seeds must be"),
        ({**RAW, "seeds": 3}, r"seeds must be a list of integers, got 3 \(seed 3 alone: \[3\]"),
        ({**RAW, "seeds": []}, "seeds must be"),
        ({**RAW, "axes": {"train.lr": []}}, "non-empty list"),
        (
            {**RAW, "branch": {"from": "nope", "step": 1}},
            r"branch.from must name one of the variants \(baseline, sfa\), got 'nope'",
        ),
        (  # no variants: the one variant is `baseline`, which the message names
            {**RAW, "variants": {}, "branch": {"from": "fa2", "step": 1}},
            r"one of the variants \(baseline\), got 'fa2'",
        ),
        ({**RAW, "branch": {"from": "baseline", "step": -1}}, "branch.step"),
        ({**RAW, "base": [1]}, "base must be a mapping"),
    ],
)
def test_bad_suites_are_rejected(raw, needle: str) -> None:
    with pytest.raises(FlashprobeError, match=needle):
        expand_suite(raw)


def test_load_suite_errors(tmp_path) -> None:
    with pytest.raises(FlashprobeError, match="not found"):
        load_suite(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: {train: [\n")
    with pytest.raises(FlashprobeError, match="malformed YAML"):
        load_suite(bad)


def test_deep_merge_does_not_mutate() -> None:
    base = {"a": {"b": 1, "c": 2}}
    merged = deep_merge(base, {"a": {"b": 3}})
    assert merged == {"a": {"b": 3, "c": 2}} and base == {"a": {"b": 1, "c": 2}}


def test_cli_run_overrides_win_over_variants() -> None:
    suite = expand_suite(RAW, overrides=["kernel.preset=fp32"])
    assert {c.config["kernel"]["preset"] for c in suite.cells} == {"fp32"}


def test_cli_suite_edits() -> None:
    suite = expand_suite(
        RAW,
        overrides=[
            "seeds=[3]",
            "branch.step=2",
            "variants.sfa.kernel.beta=4",
            "axes.train.lr=[5.0e-3]",
            "base.train.steps=7",
        ],
    )
    assert {c.seed for c in suite.cells} == {3} and len(suite.cells) == 2
    sfa = next(c for c in suite.cells if c.variant == "sfa")
    assert sfa.config["kernel"] == {"preset": "sfa", "beta": 4} and sfa.branch_step == 2
    assert {c.config["train"]["lr"] for c in suite.cells} == {5e-3}
    assert {c.config["train"]["steps"] for c in suite.cells} == {7}


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("train.lr=1", "collides with axis 'train.lr'"),
        ("train=1", "collides with axis"),
        ("variants.nope.kernel.beta=4", "no variant 'nope'"),
    ],
)
def test_bad_cli_overrides(override: str, needle: str) -> None:
    with pytest.raises(FlashprobeError, match=needle):
        expand_suite(RAW, overrides=[override])


def test_validator_may_normalise_and_branches_key_their_source() -> None:
    suite = expand_suite(RAW, validate=lambda c: {**c, "normalised": True})
    assert all(c.config["normalised"] for c in suite.cells)
    sfa = next(c for c in suite.cells if c.variant == "sfa")
    assert sfa.source_config is not None and sfa.source_config["kernel"]["preset"] == "fa2"
    changed = {
        **RAW,
        "variants": {"baseline": {"train": {"steps": 11}}, "sfa": RAW["variants"]["sfa"]},
    }
    sfa2 = next(c for c in expand_suite(changed).cells if c.variant == "sfa")
    # Same sfa config, but its source trained differently: a different cell.
    assert sfa2.config == expand_suite(RAW).cells[sfa_index(suite)].config
    assert cell_key(sfa2, "v1") != cell_key(expand_suite(RAW).cells[sfa_index(suite)], "v1")


def sfa_index(suite) -> int:
    return next(i for i, c in enumerate(suite.cells) if c.variant == "sfa")


def test_inherit_merges_base_and_replaces_the_rest(tmp_path) -> None:
    (tmp_path / "parent.yaml").write_text(
        "name: parent\ndescription: the parent\nseeds: [0, 1]\n"
        "base: {train: {steps: 50, lr: 1.0e-3}, kernel: {preset: fa2}}\n"
        "variants: {a: {}, b: {kernel: {preset: sfa}}}\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "child.yaml").write_text(
        "inherit: ../parent.yaml\nseeds: [3]\nbase: {train: {steps: 7}}\nvariants: {c: {}}\n"
    )
    suite = load_suite(tmp_path / "sub" / "child.yaml")
    assert suite.name == "child" and suite.description == ""  # never inherited
    (cell,) = suite.cells
    assert (cell.variant, cell.seed) == ("c", 3)
    assert cell.config["train"] == {"steps": 7, "lr": 1.0e-3}
    assert cell.config["kernel"] == {"preset": "fa2"}
    assert "inherit" not in suite.raw


def test_jobs_is_the_files_own_and_checked(tmp_path) -> None:
    (tmp_path / "parent.yaml").write_text("jobs: 2\nbase: {}\n")
    (tmp_path / "child.yaml").write_text("inherit: parent.yaml\n")
    assert load_suite(tmp_path / "parent.yaml").jobs == 2
    assert load_suite(tmp_path / "child.yaml").jobs == 1  # how a file runs is not inherited
    for bad in ("0", "true", "2.5", "'2'"):
        (tmp_path / "bad.yaml").write_text(f"jobs: {bad}\nbase: {{}}\n")
        with pytest.raises(FlashprobeError, match="jobs must be an integer >= 1"):
            load_suite(tmp_path / "bad.yaml")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("inherit: missing.yaml\n", "suite file not found"),
        ("inherit: 3\n", "inherit must name another suite file"),
        ("inherit: self.yaml\n", "cycle"),
    ],
)
def test_inherit_errors(tmp_path, text: str, needle: str) -> None:
    (tmp_path / "self.yaml").write_text(text + "base: {}\n")
    with pytest.raises(FlashprobeError, match=needle):
        load_suite(tmp_path / "self.yaml")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "../x"}, "suite name '../x'"),
        ({"name": "/abs/path"}, "suite name"),
        ({"name": ""}, "suite name is empty"),
        ({"name": ".."}, "suite name"),
        ({"name": "a" * 65}, "at most 64"),
        ({"name": None}, None),  # null: the default name
        ({"name": ["x"]}, "suite name must be a string"),
        ({"variants": {"a/b": {}}}, "variant name 'a/b'"),
        ({"variants": {"": {}}}, "variant name is empty"),
        ({"variants": {"x y": {}}}, "variant name 'x y'"),
        ({"variants": {".hidden": {}}}, "variant name"),
        ({"variants": {None: {}}}, "variant name must be a string"),
        ({"variants": {"fa2": {}, "FA2": {}}}, "would share a folder"),
        ({"variants": {"fa2": {}, 16: {}}}, "variant name 16 is a number in YAML; quote it"),
        ({"name": 16}, "suite name 16 is a number in YAML; quote it"),
        ({"name": 1000.0}, "suite name 1000.0 is a number in YAML"),
    ],
)
def test_names_are_checked_and_never_collide(changes: dict, message: str | None) -> None:
    raw = {"seeds": [0], "base": {"train": {"steps": 2}}, **changes}
    if message is None:
        assert expand_suite(raw, default_name="from-file").name == "from-file"
        return
    with pytest.raises(FlashprobeError, match=re.escape(message)):
        expand_suite(raw)


def test_a_file_name_that_is_no_suite_name_asks_for_name(tmp_path) -> None:
    path = tmp_path / "my suite.yaml"
    path.write_text("base: {train: {steps: 2}}\n")
    with pytest.raises(FlashprobeError, match="taken from the file name; set `name:`"):
        load_suite(path)
    path.write_text("name: mine\nbase: {train: {steps: 2}}\n")
    assert load_suite(path).name == "mine"


def test_a_variant_added_by_set_is_checked_too() -> None:
    with pytest.raises(FlashprobeError, match="variant name"):
        expand_suite(RAW, overrides=["variants={'../x': {}}"])


def test_a_suite_of_too_many_cells_is_refused_before_expanding() -> None:
    raw = {**RAW, "axes": {f"x.a{i}": list(range(10)) for i in range(6)}}  # 10**6 points
    with pytest.raises(FlashprobeError, match=r"expands to 4000000 cells .*at most 10000"):
        expand_suite(raw)


@pytest.mark.parametrize(
    "axes",
    [
        {"train.lr": [1e-3, 1e-3]},
        {"train.lr": [1e-3, 0.001]},  # written differently, the same value
        {"train.lr": [1e-3, 2e-3], "train.steps": [10, 10]},
    ],
)
def test_an_axis_that_repeats_a_value_is_refused(axes: dict) -> None:
    # Two grid points with one config would be one cell folder trained twice (or skipped).
    with pytest.raises(FlashprobeError, match="the same run"):
        expand_suite({**RAW, "axes": axes})


def test_grid_points_that_a_validator_makes_equal_are_refused() -> None:
    raw = {**RAW, "axes": {"train.lr": [1e-3, 2e-3]}}

    def same_lr(config):  # normalises both points to one run
        return {**config, "train": {**config["train"], "lr": 1e-3}}

    with pytest.raises(FlashprobeError, match=r"variant 'baseline': grid points .* the same run"):
        expand_suite(raw, validate=same_lr)


@pytest.mark.parametrize(
    ("where", "raw", "overrides"),
    [
        ("base", {**RAW, "base": {**RAW["base"], "seed": 3}}, []),
        ("variant", {**RAW, "variants": {"baseline": {"seed": 3}}}, []),
        ("--set", RAW, ["seed=3"]),
        ("axis", {**RAW, "axes": {"seed": [3, 4]}}, []),
    ],
)
def test_a_seed_outside_the_seeds_list_is_refused(where: str, raw: dict, overrides: list) -> None:
    # The suite's seeds list sets every cell's seed: a `seed:` anywhere else was dropped.
    with pytest.raises(FlashprobeError, match=r"seed: set seeds with the suite's `seeds` list"):
        expand_suite(raw, overrides=overrides)


@pytest.mark.parametrize("description", [["a", "b"], {"a": 1}, 3])
def test_a_description_must_be_text(description) -> None:
    with pytest.raises(FlashprobeError, match="description must be a string"):
        expand_suite({**RAW, "description": description})
    assert expand_suite({**RAW, "description": None}).description == ""


@pytest.mark.parametrize("typed", ["0x10", "1_000", "007", "123"])
def test_a_name_yaml_reads_as_a_number_must_be_quoted(tmp_path, typed: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: {typed}\nbase: {{train: {{steps: 2}}}}\n")
    with pytest.raises(FlashprobeError, match="is a number in YAML; quote it"):
        load_suite(path)
    path.write_text(f"name: '{typed}'\nbase: {{train: {{steps: 2}}}}\n")
    assert load_suite(path).name == typed
