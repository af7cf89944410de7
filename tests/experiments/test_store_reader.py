"""Reading a result store: helpers over metrics records."""

from __future__ import annotations

from flashprobe.experiments import store_reader as sr


def test_attention_maxima_take_the_largest_over_layers_and_heads() -> None:
    record = {
        "attention": {
            "0": {"max_logit": [3.0, None], "key_shift_leak": [0.01, 0.02]},
            "1": {"max_logit": [7.5, 1.0], "tie_events": [None, None]},
        }
    }
    assert sr.attention_maxima(record) == {"max_logit": 7.5, "key_shift_leak": 0.02}
    assert sr.attention_maxima(record, ["tie_events"]) == {}  # measured by no head
    assert sr.attention_maxima({"step": 3}) == {}
