"""digest.replay: a replay.json → its compact digest form, checked against the records it pools;
the pooled t is the t of every head's rows together; malformed entries are refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from flashprobe.attribution.mechanism import signed_error
from flashprobe.errors import FlashprobeError
from flashprobe.reporting.digest.loader import load_digest
from flashprobe.reporting.digest.replay import compact, parse, pooled_t
from flashprobe.store import reader as sr
from flashprobe.store.replay_results import read_replay


def _source_doc(store: Path) -> dict:
    (cell,) = [c for c in sr.read_cells(store) if c.variant == "touchy"]
    doc = read_replay(cell)
    assert doc is not None
    return doc


def test_pooled_t_is_the_t_of_all_rows_together() -> None:
    g = torch.Generator().manual_seed(3)
    for sizes, shifts in (([7, 30, 2, 64], [0.0, 0.1, -0.2, 0.05]), ([128, 128], [1e-3, -1e-3])):
        heads = [0.3 * torch.randn(n, generator=g, dtype=torch.float64) + s
                 for n, s in zip(sizes, shifts, strict=True)]  # fmt: skip
        stats = [(h.numel(), *signed_error(h.unsqueeze(-1))) for h in heads]
        _, expected = signed_error(torch.cat(heads).unsqueeze(-1))
        assert pooled_t(stats) == pytest.approx(expected, rel=1e-9)
    constant = [(4, 2e-3, math.inf), (4, 2e-3, math.inf)]  # every row the same error
    assert pooled_t(constant) == math.inf
    assert pooled_t([(4, 1e-3, math.inf), (4, -1e-3, -math.inf)]) == 0.0
    assert pooled_t([(4, 0.0, 0.0), (4, 1e-3, 2.0)]) is None  # a 0 mean hides its spread
    assert pooled_t([(1, 1e-3, math.nan), (1, 2e-3, math.nan)]) is not None  # one row each


def test_compact_pools_the_records_per_variant_layer_and_step(replayed_store: Path) -> None:
    doc = _source_doc(replayed_store)
    got = compact(doc)
    assert got["source_cell"] == doc["source_cell"] and got["steps"] == [5, 9, 25]
    assert got["layers"] == [0, 1] and got["backend"] == "emulator"
    assert set(got["delta"]) == {"touchy", "paper-code"}
    suite_summary = json.loads((replayed_store / "replayed" / "replay.json").read_text())
    assert got["summary"] == suite_summary["summary"]  # one source: the replay's own summary
    for variant, layers in got["delta"].items():
        assert set(layers) == {"0", "1"}
        for layer, rows in layers.items():
            running = 0.0
            assert [r[0] for r in rows] == [5, 9, 25]
            for step, mean, t, total, running_sum, positive, heads in rows:
                recs = [r for r in doc["records"] if (r["variant"], r["layer"], r["step"])
                        == (variant, int(layer), step)]  # fmt: skip
                assert heads == len(recs) == 2  # n_head
                assert total == pytest.approx(sum(r["delta_sum"] for r in recs))
                assert mean == pytest.approx(total / sum(r["rows"] for r in recs))
                running += total
                assert running_sum == pytest.approx(running)
                assert positive == sum(r["delta_mean"] > 0 for r in recs)
                assert t == pytest.approx(
                    pooled_t([(r["rows"], r["delta_mean"], r["delta_t"]) for r in recs])
                )
                assert t is None or math.copysign(1, t) == math.copysign(1, mean)
            grads = got["gradients"][variant][layer]
            assert [g[0] for g in grads] == [5, 9, 25]
            for step, dq, dk in grads:
                recs = [r for r in doc["records"] if (r["variant"], r["layer"], r["step"])
                        == (variant, int(layer), step)]  # fmt: skip
                for got_rel, name in ((dq, "dq"), (dk, "dk")):
                    err = sum((r[f"{name}_rel"] * r[f"{name}_ref_norm"]) ** 2 for r in recs)
                    ref = sum(r[f"{name}_ref_norm"] ** 2 for r in recs)
                    assert got_rel == pytest.approx(math.sqrt(err / ref))  # heads together
                assert 0 < dq < 1
            series = [s for s in doc["series"]
                      if (s["variant"], s["layer"]) == (variant, int(layer))]  # fmt: skip
            per_head = [sum(v) for v in zip(*(s["delta_cumsum"] for s in series), strict=True)]
            assert [r[4] for r in rows] == pytest.approx(per_head)  # the replay's own sums


def test_gradients_pool_the_heads_by_size_or_average_older_replays(replayed_store: Path) -> None:
    doc = _source_doc(replayed_store)
    old_records = [{k: v for k, v in r.items() if not k.endswith("_ref_norm")}
                   for r in doc["records"]]  # fmt: skip
    got = compact({**doc, "records": old_records})["gradients"]["touchy"]["0"]
    for step, dq, _ in got:
        recs = [r for r in doc["records"] if (r["variant"], r["layer"], r["step"])
                == ("touchy", 0, step)]  # fmt: skip
        assert dq == pytest.approx(sum(r["dq_rel"] for r in recs) / len(recs))
    broken = [{**r, "dq_rel": None} if i == 0 else r for i, r in enumerate(doc["records"])]
    first = doc["records"][0]
    rows = compact({**doc, "records": broken})["gradients"][first["variant"]][str(first["layer"])]
    assert next(r for r in rows if r[0] == first["step"])[1] is None


def test_compact_refuses_what_it_cannot_read(replayed_store: Path) -> None:
    doc = _source_doc(replayed_store)
    with pytest.raises(ValueError, match="format"):
        compact({**doc, "format": "flashprobe-replay/0"})
    with pytest.raises(ValueError, match="without 'delta_sum'"):
        compact({**doc, "records": [{"variant": "x", "layer": 0, "step": 1}]})


def test_parse_round_trips_and_refuses_malformed_entries(replayed_store: Path) -> None:
    raw = json.loads(json.dumps(compact(_source_doc(replayed_store))))
    replay = parse(raw, "cell 0")
    assert replay is not None and replay.to_dict() == raw
    steps = replay.delta["touchy"][1]
    assert [s.step for s in steps] == [5, 9, 25]
    assert {s.sign for s in steps} <= {"+", "−"}
    assert [x[2].step for x in replay.rows(before=12)] == [5, 9] * 4
    assert parse(None, "cell 0") is None
    assert parse({"error": "corrupt"}, "cell 0").error == "corrupt"  # type: ignore[union-attr]
    assert replay.gradients["touchy"][0][0].step == 5
    old = parse({k: v for k, v in raw.items() if k != "gradients"}, "cell 0")
    assert old is not None and old.gradients == {}  # a digest written before gradients
    for bad in ([], {"delta": {"touchy": {"0": [[5, 1.0]]}}}, {"delta": {"touchy": [1]}},
                {"gradients": {"touchy": {"0": [[5, 0.1]]}}}, {"gradients": [1]}):  # fmt: skip
        with pytest.raises(ValueError, match="replay"):
            parse(bad, "cell 0")


def test_a_digest_with_a_malformed_replay_is_one_line_error(tmp_path: Path, make) -> None:
    cell = make.cell("paper-code", 0)
    cell["replay"] = {"delta": {"paper-code": {"0": [["five"]]}}}
    path = make.digest(tmp_path / "d.json", [cell])
    with pytest.raises(FlashprobeError, match=r"not a flashprobe digest: .*d\.json"):
        load_digest(path)
