"""The driver contract (deltaflow.testing.contract), run on every registered tool dialect.

Sources of the samples:

* every dialect: one call (a string and a number argument), two calls (where the
  dialect's constraint layout allows several: all but gigachat3, internlm and openai),
  and one call with a string longer than the held-tail bound (where the driver streams
  strings: all but the pythonic ones), all rendered by the constraint
  renderer (``render_tool_calls``), so they are written in the dialect's declared
  syntax and stay in step with the declarations;
* every dialect: two malformed samples, fixed edits of the rendered call (junk right
  after the opener; a broken number value);
* ``VARIANTS``, hand-written (from JSON objects or edits of rendered text) only where
  rendering does not apply: openers and payload generations the renderer never writes
  (the renderer writes one canonical form per dialect).

Dialects that need context, handled explicitly: ``xml_tools`` takes its openers from
the request (``TOOLS`` go to every dialect, which also types the XML values by schema);
``functionary_v3_2``'s driver owns the whole output (the kit checks that the trailing
text is passed on as text); ``kimi_k3``'s response and message markers are framing the
driver drops by declaration (``dropped=``); ``openai`` is checked through the stages
only (see ``check_tool_dialect``): its driver reads call bodies that the Harmony channel
router opened, never text from an opener.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from deltaflow.constrain import render_tool_calls
from deltaflow.constrain.layouts import layout_for
from deltaflow.items import Channel, ToolDelta
from deltaflow.parsers import registry
from deltaflow.parsers.registry import get_tool_dialect, tool_dialect_names
from deltaflow.testing.contract import check_tool_dialect


def tool(name: str, **props: Any) -> dict[str, Any]:
    """An OpenAI tool definition whose parameters have the given property schemas (all required)."""
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": props, "required": list(props)}},
    }


TOOLS = [
    tool("get_weather", city={"type": "string"}, days={"type": "integer"}),
    tool("write_file", path={"type": "string"}, content={"type": "string"}),  # xml_tools: a content-like value
    tool("get_time"),  # no parameters (the pythonic variants: an empty call)
]
WEATHER = ("get_weather", {"city": "Paris", "days": 42})
WRITE = ("write_file", {"path": "a.txt", "content": 'say "hi" <b> </x> \\ é 天气 {[(\n  x'})  # near-syntax, not markers
LONG_CITY = "a long city name, " * 70  # 1260 characters: longer than the held-tail bound (600 + the longest marker)
JUNK = "}]) oops <"

# Dialects whose driver holds a string value whole until it ends (documented: the pythonic
# driver converts a Python literal whole; lfm2 reads its calls as Python): no long sample.
HOLDS_STRINGS_WHOLE = frozenset({"pythonic", "llama4_pythonic", "olmo3", "lfm2"})


def render(dialect: str, *calls: tuple[str, dict[str, Any]]) -> str:
    """``calls`` in ``dialect``'s canonical syntax."""
    return render_tool_calls(dialect, list(calls), TOOLS)


def obj(call: tuple[str, dict[str, Any]], args: str = "arguments") -> str:
    """A JSON envelope object of ``call``."""
    return json.dumps({"name": call[0], args: call[1]})


def arr(*calls: tuple[str, dict[str, Any]]) -> str:
    """A JSON array of envelope objects."""
    return "[" + ", ".join(obj(c) for c in calls) + "]"


def unwrap(text: str, head: str, tail: str) -> str:
    """``text`` without every ``head`` and ``tail`` (a block wrapper)."""
    return text.replace(head, "").replace(tail, "")


_PY_SINGLE = "[get_weather(city='Paris', days=42), write_file(path='a.txt', content='say \"hi\"\\n'), get_time()]"

# Forms the renderer does not write, per dialect (each a well-formed output of the dialect).
VARIANTS: dict[str, Callable[[], list[str]]] = {
    "deepseek_v32": lambda: [
        unwrap(render("deepseek_v32", WEATHER, WRITE), "<｜DSML｜function_calls>\n", "\n</｜DSML｜function_calls>")
    ],
    "deepseek_v4": lambda: [
        unwrap(render("deepseek_v4", WEATHER, WRITE), "<｜DSML｜tool_calls>\n", "\n</｜DSML｜tool_calls>")
    ],
    "gigachat3": lambda: [f"<|function_call|>{obj(WEATHER)}"],
    "granite": lambda: [f"<tool_call>{arr(WEATHER, WRITE)}", arr(WEATHER, WRITE)],
    "kimi_k2": lambda: [
        render("kimi_k2", WEATHER, WRITE)
        .replace("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
        .replace("<|tool_calls_section_end|>", "<|tool_call_section_end|>"),
        unwrap(render("kimi_k2", WEATHER), "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
    ],
    # Kimi K3's response and message markers: framing blocks, dropped (KIMI_K3_FRAMING).
    "kimi_k3": lambda: ["<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"],
    "lfm2": lambda: [
        f"<|tool_call_start|>{arr(WEATHER, WRITE)}<|tool_call_end|>",
        f"<|tool_call_start|>{obj(WEATHER)}<|tool_call_end|>",
    ],
    "llama3_json": lambda: ["<|python_tag|>" + render("llama3_json", WEATHER, WRITE)],
    "llama4_pythonic": lambda: [f"<|python_start|>{render('llama4_pythonic', WEATHER, WRITE)}<|python_end|>", _PY_SINGLE],
    "mistral": lambda: [
        f"[TOOL_CALLS] {arr(WEATHER, WRITE)}",  # pre-v11
        re.sub(r"\[CALL_ID\][^[]*", "", render("mistral", WEATHER, WRITE)),  # v13+
        f"[TOOL_CALLS] {obj(WEATHER)}",  # a bare object
        '[TOOL_CALLS] {"name": "get_weather", "arguments": ' + json.dumps(json.dumps(WEATHER[1])) + "}",  # stringified
    ],
    "pythonic": lambda: [f"<|python_start|>{render('pythonic', WEATHER, WRITE)}<|python_end|>", _PY_SINGLE],
    "qwen3_coder": lambda: [unwrap(render("qwen3_coder", WEATHER, WRITE), "<tool_call>\n", "\n</tool_call>")],
    "step3p5": lambda: [unwrap(render("step3p5", WEATHER, WRITE), "<tool_call>\n", "\n</tool_call>")],
    "xlam": lambda: [
        f"<tool_call>{arr(WEATHER, WRITE)}</tool_call>",
        f"[TOOL_CALLS]{arr(WEATHER, WRITE)}",
        f"```json\n{arr(WEATHER, WRITE)}\n```",
        f"```\n{arr(WEATHER, WRITE)}\n```",
    ],
}
KIMI_K3_FRAMING = ("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>")


def opener_end(dialect: str, text: str) -> int:
    """Where the opener that ``text`` starts with ends (openai, routed by its headers: its first ``<|message|>``)."""
    if dialect == "openai":
        return text.index("<|message|>") + len("<|message|>")
    d = get_tool_dialect(dialect)
    request = tuple(f"<{t['function']['name']}>" for t in TOOLS) if d.openers_for is not None else ()
    starts = [o for o in (*d.openers, *request, *d.start_openers) if text.startswith(o)]
    assert starts, (dialect, text)
    return max(map(len, starts))


def well_formed(dialect: str) -> list[str]:
    """One call, two calls (where the declared layout allows several), one call with a long string (where strings
    stream), and the dialect's variants."""
    out = [render(dialect, WEATHER)]
    if layout_for(dialect).multi:  # gigachat3, internlm, openai: one call per output
        out.append(render(dialect, WEATHER, WRITE))
    if dialect not in HOLDS_STRINGS_WHOLE:
        out.append(render(dialect, ("get_weather", {"city": LONG_CITY, "days": 42})))
    return out + VARIANTS.get(dialect, list)()


def malformed(dialect: str) -> list[str]:
    """Junk right after the opener; a broken number value."""
    one = render(dialect, WEATHER)
    k = opener_end(dialect, one)
    assert one.count("42") == 1, one
    return [one[:k] + JUNK + one[k:], one.replace("42", "4}2]) x")]


DIALECTS = tool_dialect_names()

# Contract violations found by the kit, pending a fix in the driver (strict: the mark goes with the fix).
XFAIL: dict[str, str] = {}


def test_every_dialect_is_covered() -> None:
    """The parametrization below is the registry: a new dialect is checked as soon as it is registered."""
    assert len(DIALECTS) >= 45 and set(VARIANTS) <= set(DIALECTS)


@pytest.mark.parametrize(
    "dialect",
    [pytest.param(d, marks=pytest.mark.xfail(strict=True, reason=XFAIL[d])) if d in XFAIL else d for d in DIALECTS],
)
def test_driver_contract(dialect: str) -> None:
    """Final ends the block, nothing past it is consumed, the held tail is bounded, feedings agree, raw accounts."""
    check_tool_dialect(
        dialect,
        well_formed(dialect),
        malformed=malformed(dialect),
        tools=TOOLS,
        dropped=KIMI_K3_FRAMING if dialect == "kimi_k3" else (),
    )


# -- the kit catches what it should: a real driver made to break one rule at a time ---------------------------------


class Broken:
    """The hermes driver, made to break one rule of the contract (``how``)."""

    def __init__(self, inner: Any, how: str) -> None:
        self.inner = inner
        self.how = how
        self.late: list[object] = []
        self.done = False

    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        how = self.how
        if how == "hoards" and not final and "</tool_call>" not in text[start:]:
            return start  # consumes nothing until its closer is in view: the caller holds everything
        if how == "ignores_start":
            start = 0
        events: list[object] = []
        end = int(self.inner.feed_tool_block(text, events, False if how == "ignores_final" else final, start))
        if how == "loses_raw":
            events = [msgspec.structs.replace(e, raw="") if isinstance(e, ToolDelta) else e for e in events]
        if how == "args_per_feed" and not final and events:
            events.append(ToolDelta(call=0, channel=Channel.CONTENT, args=" "))
        if how == "releases_late":  # consumes, but keeps every event until the block is over
            self.late += events
            events = []
            if self.inner.done:
                events, self.late = self.late, []
        out += events
        self.done = bool(self.inner.done)
        if how == "greedy" and self.inner.done and not final:
            return len(text)  # takes the text after the block too
        return end


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("ignores_final", "fed with final=True, the driver is not done"),
        ("greedy", "past its end .* in the whole run"),
        ("hoards", "the caller holds"),
        ("releases_late", "accounted for by no event yet"),
        ("loses_raw", "raw text of the events"),
        ("args_per_feed", "events differ from the whole run"),
        ("ignores_start", r"after it: feed_tool_block returned 0, outside \[13, "),
    ],
)
def test_the_kit_catches_a_broken_driver(monkeypatch: pytest.MonkeyPatch, how: str, message: str) -> None:
    """Each rule broken alone is reported, with the dialect, the sample and the split."""
    hermes = get_tool_dialect("hermes")
    name = f"hermes_{how}"
    broken = dataclasses.replace(hermes, name=name, factory=lambda ctx: Broken(hermes.factory(ctx), how))
    monkeypatch.setitem(registry._TOOL, name, broken)
    sample = render("hermes", ("get_weather", {"city": LONG_CITY, "days": 42}))
    with pytest.raises(AssertionError, match=f"tool dialect '{name}', sample 0 .*{message}"):
        check_tool_dialect(name, [sample], tools=TOOLS)


def test_the_kit_wants_tools_and_samples() -> None:
    """A dialect whose openers come from the request needs tools; no samples check nothing."""
    with pytest.raises(ValueError, match="tools="):
        check_tool_dialect("xml_tools", well_formed("hermes"))
    with pytest.raises(ValueError, match="no samples"):
        check_tool_dialect("hermes", [])
