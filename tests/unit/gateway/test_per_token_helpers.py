"""The gateway's per-token helpers: the light inter-token histogram and end-text holding.

Each is a faster form of something simpler, so each is checked against it: the
histogram against ``prometheus_client.Histogram``'s exposition, the end-text
shortcut against the plain search. The reader's timing behaviour (idle limit,
first byte) is tested against a real server in ``test_upstreams.py``.
"""

from __future__ import annotations

import prometheus_client as prom
from hypothesis import given
from hypothesis import strategies as st

from deltaflow.gateway.engine import _partial_end
from deltaflow.gateway.metrics import LightHistogram

# -- LightHistogram -----------------------------------------------------------------------------------------------

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.1, 1.0)


def _samples(registry: prom.CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]),
                          st.one_of(st.sampled_from(_BUCKETS), st.floats(min_value=0, max_value=5))), max_size=40))
def test_light_histogram_exposes_what_prometheus_histogram_does(observations: list[tuple[str, float]]) -> None:
    ref_reg, light_reg = prom.CollectorRegistry(), prom.CollectorRegistry()
    ref = prom.Histogram("x_seconds", "help", ["model"], buckets=_BUCKETS, registry=ref_reg)
    light = LightHistogram("x_seconds", "help", "model", _BUCKETS)
    light_reg.register(light)
    for model, value in observations:
        ref.labels(model).observe(value)
        light.labels(model).observe(value)
    got, want = _samples(light_reg), _samples(ref_reg)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert abs(got[key] - value) <= 1e-9 * max(1.0, abs(value)), key
    assert prom.generate_latest(light_reg).count(b"# TYPE x_seconds histogram") == 1


# -- end-text holding ---------------------------------------------------------------------------------------------


@given(text=st.text(alphabet="<|im_end>x ", max_size=20),
       ends=st.lists(st.text(alphabet="<|im_end>", min_size=1, max_size=10), min_size=1, max_size=3))
def test_partial_end_is_the_longest_suffix_an_end_text_starts_with(text: str, ends: list[str]) -> None:
    longest = max(len(e) for e in ends)
    starts = "".join(sorted({e[0] for e in ends}))
    want = _longest_partial_end(text, ends)
    assert _partial_end(text, tuple(ends), longest, starts) == want
    assert _partial_end(text, tuple(ends), longest) == want


def _longest_partial_end(text: str, ends: list[str]) -> int:
    """The plain search: every suffix length, longest first."""
    for k in range(len(text), 0, -1):
        if any(e.startswith(text[-k:]) for e in ends):
            return k
    return 0


def test_partial_end_on_the_usual_end_texts() -> None:
    ends = ("<|im_end|>", "<|endoftext|>")
    longest, starts = 13, "<"
    assert _partial_end("hello", ends, longest, starts) == 0
    assert _partial_end("a <b> <|im", ends, longest, starts) == 4
    assert _partial_end("x<|endoftext|>", ends, longest, starts) == 13
    assert _partial_end("x <", ends, longest, starts) == 1
    assert _partial_end("<|im_end|> <", ends, longest, starts) == 1  # a whole end text earlier is not a suffix
