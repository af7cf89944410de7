"""Property-based: `flashprobe ablate` on random suite documents, `--set` strings and names.

Whatever the input, validation ends with exit 0 or with exit 2 and one line on stderr (never a
traceback), and what a run writes before training (suite.json, every cell's folder, header files
and lock) lands inside --store, nowhere else.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from flashprobe.cli import main
from flashprobe.runner.cell_lock import cell_lock
from flashprobe.runner.definition import write_suite_definition
from flashprobe.runner.plan import plan_suite
from flashprobe.runner.prepare import prepare_suite
from flashprobe.store.result_store import ResultStore
from flashprobe.train.config import TrainConfig

SECTIONS = {name: [f.name for f in cls.__dataclass_fields__.values()]  # type: ignore[attr-defined]
            for name, cls in TrainConfig.SECTIONS.items()}  # fmt: skip
SUITE_KEYS = ["name", "description", "seeds", "base", "variants", "axes", "branch", "replay",
              "failure", "bogus"]  # fmt: skip
# A valid, fast base: the random edits start from something that can pass.
BASE = {
    "model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": 8,
              "attention": {"impl": "flashprobe", "backend": "emulator"}},
    "data": {"max_bytes": 10_000},
    "train": {"steps": 2, "batch_size": 2, "device": "cpu"},
}  # fmt: skip

valid_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,70}", fullmatch=True)
names = st.one_of(
    valid_names,
    valid_names,
    st.text(max_size=80),
    st.sampled_from(["../x", "/abs", ".", "..", "", "a/b", "fa2", "FA2", "x" * 65, "a--b"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["fa2", "sfa", "cpu", "cuda", "bf16", "1e-3", "256MiB", "full"]),
)
plausible = st.sampled_from([1, 2, 4, 0, 1e-3, 0.5, True, False, None, "fa2", "sfa", "cpu",
                             "bf16", "cosine", "constant", "emulator", [0], [1, 2]])  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def run_sections(draw: st.DrawFn) -> dict[str, Any]:
    """A run config: known sections and keys with random values, now and then a stray key."""
    out: dict[str, Any] = {}
    for section in draw(st.lists(st.sampled_from([*SECTIONS, "kernel", "capture", "nope"]),
                                 max_size=3, unique=True)):  # fmt: skip
        keys = SECTIONS.get(section, ["preset", "beta", "layers", "steps", "max_bytes", "x"])
        chosen = draw(st.lists(st.sampled_from(keys), max_size=3, unique=True))
        out[section] = {k: draw(st.one_of(plausible, plausible, values)) for k in chosen}
    return out


@st.composite
def suites(draw: st.DrawFn) -> Any:
    """A suite document: mostly a mapping built from the suite's own keys, sometimes anything."""
    if draw(st.integers(0, 9)) == 0:
        return draw(values)
    doc: dict[Any, Any] = {"base": BASE}
    for key in draw(st.lists(st.sampled_from(SUITE_KEYS), max_size=5, unique=True)):
        if key == "name":
            doc[key] = draw(names)
        elif key == "seeds":
            seeds = st.lists(st.one_of(st.integers(0, 3), st.integers(-3, 2**65)), max_size=3)
            doc[key] = draw(st.one_of(seeds, seeds, values))
        elif key == "base":
            doc[key] = {**BASE, **draw(run_sections())}
        elif key == "variants":
            delta = st.one_of(run_sections(), st.just({}), values)
            doc[key] = draw(st.dictionaries(names, delta, max_size=3))
        elif key == "axes":
            axis = st.sampled_from(["train.steps", "optimizer.lr", "kernel.beta", "x.y", ""])
            axis_values = st.lists(st.one_of(plausible, values), max_size=3)
            doc[key] = draw(st.dictionaries(axis, axis_values, max_size=2))
        elif key == "branch":
            doc[key] = draw(st.one_of(values, st.fixed_dictionaries(
                {"from": names, "step": st.integers(-1, 3)})))  # fmt: skip
        elif key == "replay":
            doc[key] = draw(st.one_of(st.just(False), st.builds(lambda b: {"baseline": b}, names),
                                      values))  # fmt: skip
        elif key == "failure":
            doc[key] = draw(st.one_of(st.just({"event": "divergence"}), values))
        elif key == "description":
            doc[key] = draw(st.one_of(st.text(), values))
        else:
            doc[key] = draw(values)
    return doc


KEYS = ["train.steps", "seeds", "name", "variants.fa2.kernel.beta", "axes.optimizer.lr",
        "branch.step", "base.train.device", "kernel", "replay.baseline", "failure.event",
        "description", "a..b", "."]  # fmt: skip
assignments = st.one_of(
    st.sampled_from(
        [
            "train.steps=3",
            "seeds=[0,1]",
            "kernel.beta=4",
            "name=other",
            "variants={a: {}, b: {kernel: {preset: sfa}}}",
            "axes.optimizer.lr=[1e-3]",
            "description=[*a]",
            "variants.x.train.steps=1",
        ]
    ),
    st.text(max_size=40),
    st.builds(
        lambda key, value: f"{key}={value}",
        st.one_of(
            st.sampled_from(KEYS),
            st.text(max_size=15),
        ),
        st.one_of(
            st.text(max_size=30),
            st.sampled_from(["[0,1]", "{a: 1, a: 2}", "&a [*a]", "[" * 80, "1e-3", "null"]),
        ),
    ),
)


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@settings(
    max_examples=int(os.environ.get("FLASHPROBE_HYPOTHESIS_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    document=suites(),
    raw_text=st.one_of(st.none(), st.none(), st.none(), st.text(max_size=200), st.binary()),
    overrides=st.one_of(st.just([]), st.lists(assignments, max_size=3)),
)
def test_any_suite_and_set_validates_to_exit_0_or_2_and_writes_only_in_the_store(
    document: Any, raw_text: str | bytes | None, overrides: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = Path(tmp)
        suite_file = sandbox / "in" / "suite.yaml"
        suite_file.parent.mkdir()
        if raw_text is None:
            suite_file.write_text(yaml.safe_dump(document, allow_unicode=True))
        elif isinstance(raw_text, bytes):
            suite_file.write_bytes(raw_text)
        else:
            suite_file.write_text(raw_text)
        store = sandbox / "store"
        args = ["ablate", "-c", str(suite_file), "--store", str(store), "--dry-run"]
        for item in overrides:
            args += ["--set", item]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        message = err.getvalue()
        event(f"exit {code}")
        assert "Traceback" not in message, message
        assert code in (0, 2), (code, message)
        if code == 2:
            assert len(message.strip().splitlines()) == 1, message
            assert message.startswith("flashprobe: error: "), message
        before = _files(sandbox)
        assert not store.exists()  # a dry run writes nothing
        if code != 0:
            return
        # What a real run writes before it trains: inside the store, whatever the names.
        suite = prepare_suite(suite_file, overrides)
        result_store = ResultStore(store)
        write_suite_definition(result_store, suite, overrides)
        for planned in plan_suite(suite, result_store, version="test"):
            with cell_lock(planned.path):
                result_store.open_cell(planned.cell, "test", {"device": "cpu"})
        written = _files(sandbox) - before
        root = store.resolve()
        assert written and all(p.resolve().is_relative_to(root) for p in written), written


def test_the_strategies_reach_valid_suites() -> None:
    """The property above is only as good as its inputs: a fair share of them must pass."""
    passed = 0

    @settings(
        max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(document=suites())
    def count(document: Any) -> None:
        nonlocal passed
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "suite.yaml"
            path.write_text(yaml.safe_dump(document))
            with contextlib.suppress(Exception):
                prepare_suite(path)
                passed += 1

    count()
    assert passed >= 5, passed
