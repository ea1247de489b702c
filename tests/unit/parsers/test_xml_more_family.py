"""More XML-like dialects: ``minicpm5`` (CDATA values) and ``minimax_m3`` (element-per-parameter, nested)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.parsers.dialects.minicpm import MINICPM5_FORMAT
from deltaflow.parsers.dialects.minimax import MINIMAX_M3_FORMAT, MINIMAX_M3_MARKER
from deltaflow.parsers.spec import all_prefixes
from deltaflow.testing import check_chunkings, feed_chunks, message_key

M = MINIMAX_M3_MARKER


def tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool definition with the given property schemas."""
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


TOOLS = [
    tool("get_weather", {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "pts": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "opts": {"type": "object", "properties": {
            "unit": {"type": "string"}, "n": {"type": "number"},
            "deep": {"$ref": "#/$defs/deep"},
        }},
    }),
    tool("ping", {}),
    tool("html", {"markup": {"type": "string"}, "n": {"type": "integer"}, "ok": {"type": "boolean"}}),
]
TOOLS[0]["function"]["parameters"]["$defs"] = {"deep": {"type": "object", "properties": {"x": {"type": "integer"}}}}


def calls(m: Any) -> list[tuple[str, Any]]:
    """The message's calls as (name, decoded arguments), each a JSON object."""
    out = []
    for c in m.tool_calls or []:
        args = json.loads(c.function.arguments)
        assert isinstance(args, dict)
        out.append((c.function.name, args))
    return out


def both(text: str, *, tokens: bool = True, **kw: Any) -> Any:
    """check_chunkings in both chunking modes (every split is a possible token boundary of these
    plain-text markers; ``tokens=False`` where qwen3's single-token think tags are in the text)."""
    kw.setdefault("tools", TOOLS)
    if tokens:
        check_chunkings(text, chunking="tokens", **kw)
    return check_chunkings(text, **kw)


def cpm(text: str, **kw: Any) -> Any:
    """A MiniCPM5 output, thinking off (the qwen3 reasoning parser)."""
    return both(text, tool_parser="minicpm5", reasoning_parser="qwen3", enable_thinking=False, **kw)


def m3(text: str, **kw: Any) -> Any:
    """A MiniMax-M3 output whose reasoning was closed (the minimax_m3 reasoning parser)."""
    return both(text, tool_parser="minimax_m3", reasoning_parser="minimax_m3", **kw)


def invoke(name: str, body: str) -> str:
    """One MiniMax-M3 call."""
    return f'{M}<invoke name="{name}">{body}{M}</invoke>\n'


def block(*invokes: str) -> str:
    """A MiniMax-M3 tool block."""
    return f"{M}<tool_call>\n" + "".join(invokes) + f"{M}</tool_call>"


def el(key: str, inner: str) -> str:
    """One MiniMax-M3 element."""
    return f"{M}<{key}>{inner}{M}</{key}>"


# -- registration and declarations --------------------------------------------------------------------


def test_registered_names_and_markers_are_declared() -> None:
    """Both tool parsers and the reasoning parser are registered; their markers are plain text, so every prefix is held."""
    cpm5 = registry.get_tool_dialect("minicpm5")
    mm3 = registry.get_tool_dialect("minimax_m3")
    assert cpm5.openers == ("<function ",)
    assert cpm5.token_prefixes == all_prefixes("<function ")
    assert mm3.openers == (f"{M}<tool_call>",)
    assert mm3.token_prefixes == all_prefixes(MINIMAX_M3_FORMAT.opener)
    assert M in mm3.markers and MINICPM5_FORMAT.cdata
    r = registry.get_reasoning_dialect("minimax_m3")
    assert (r.start, r.end, r.starts_open) == ("<mm:think>", "</mm:think>", True)
    assert r.token_prefixes == all_prefixes("<mm:think>", "</mm:think>")


def test_no_reference_tokenizer_exists_for_either_family(shared: Any) -> None:
    """shared/tokenizers has no MiniCPM or MiniMax-M3 vocabulary, which is why all prefixes are declared."""
    names = {p.name.lower() for p in (shared / "tokenizers").iterdir()}
    assert not any("minicpm" in n or "m3" in n for n in names)


# -- minicpm5 -------------------------------------------------------------------------------------------


def test_minicpm5_call_typed_by_schema() -> None:
    """Values are raw text typed by the tool's schema."""
    m = cpm('<function name="html"><param name="markup">a < b</param><param name="n">5</param>'
            '<param name="ok">true</param></function>')
    assert calls(m) == [("html", {"markup": "a < b", "n": 5, "ok": True})]
    assert not m.content


def test_minicpm5_several_calls_and_text_after() -> None:
    """Calls separated by newlines are parallel calls; text after the last one is content."""
    m = cpm('Sure.\n<function name="html"><param name="n">1</param></function>\n'
            '<function name="ping"></function>\nDone.')
    assert calls(m) == [("html", {"n": 1}), ("ping", {})]
    assert m.content == "Sure.\n\nDone."


def test_minicpm5_no_argument_call() -> None:
    """A call without parameters has ``{}``."""
    assert calls(cpm('<function name="ping"></function>')) == [("ping", {})]


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ('<![CDATA[<a href="/x">hi</a> </param>]]>', '<a href="/x">hi</a> </param>'),
        ("<![CDATA[x]]>\n  ", "x"),
        ("<![CDATA[x]]>y", "xy"),
        ("<![CDATA[]]>", ""),
        ("<![CDATA[a]]b]]>", "a]]b"),
        ("<!x", "<!x"),
        (" <![CDATA[x]]>", " <![CDATA[x]]>"),
    ],
    ids=["closer-inside", "blanks-after", "text-after", "empty", "brackets-inside", "not-cdata", "not-at-start"],
)
def test_minicpm5_cdata_values(value: str, want: str) -> None:
    """A value wrapped in CDATA keeps its content verbatim (a literal close tag included); only a leading wrapper counts."""
    m = cpm(f'<function name="html"><param name="markup">{value}</param></function>')
    assert calls(m) == [("html", {"markup": want})]


def test_minicpm5_cdata_typed_value() -> None:
    """CDATA content is typed by the schema like any value."""
    assert calls(cpm('<function name="html"><param name="n"><![CDATA[ 7 ]]></param></function>')) == [("html", {"n": 7})]


def test_minicpm5_cdata_cut_by_the_end_of_output() -> None:
    """An output that ends inside CDATA closes the string where it stopped."""
    assert calls(cpm('<function name="html"><param name="markup"><![CDATA[ab]')) == [("html", {"markup": "ab]"})]


def test_minicpm5_unknown_name_is_filtered() -> None:
    """A call to a tool the request did not offer is not emitted; its text is surfaced."""
    m = cpm('<function name="rm"><param name="a">1</param></function>')
    assert calls(m) == []
    assert "rm" in (m.content or "")


def test_minicpm5_lookalikes_stay_text() -> None:
    """``<functions>`` or an unquoted name are not calls."""
    text = "use <functions> and <function name=x> here"
    m = cpm(text)
    assert calls(m) == [] and m.content == text


def test_minicpm5_malformed_final_payload() -> None:
    """A typed value cut mid-way that is not a value yet is surfaced; the call's arguments are closed."""
    m = cpm('<function name="html"><param name="markup">x</param><param name="ok">tr')
    assert calls(m) == [("html", {"markup": "x"})]
    assert m.content == "tr" or "tr" in (m.content or "")


def test_minicpm5_reasoning_and_call_in_one_chunk() -> None:
    """Reasoning, then a call, in one chunk (the prompt pre-opened ``<think>``)."""
    text = "I'm thinking</think><function name=\"html\"><param name=\"n\">3</param></function>"
    m = both(text, tokens=False, tool_parser="minicpm5", reasoning_parser="qwen3", enable_thinking=True)
    assert m.reasoning_content == "I'm thinking"
    assert calls(m) == [("html", {"n": 3})]
    got = accumulate(feed_chunks([text], tool_parser="minicpm5", reasoning_parser="qwen3", tools=TOOLS))
    assert message_key(got) == message_key(m)


# -- minimax_m3 -----------------------------------------------------------------------------------------


def test_minimax_m3_scalar_parameters() -> None:
    """The element name is the parameter name; values are typed by the schema."""
    m = m3("</mm:think>" + block(invoke("get_weather", el("city", "Paris") + el("days", "3"))))
    assert calls(m) == [("get_weather", {"city": "Paris", "days": 3})]
    assert not m.content and not m.reasoning_content


def test_minimax_m3_nested_objects_and_arrays() -> None:
    """An object parameter's child elements are its members (nested, typed by nested schemas, a $ref included); an array's are its items."""
    body = (
        el("opts", "\n" + el("unit", "C") + el("n", "1.5") + el("deep", el("x", "4")))
        + el("tags", el("item", "a") + "\n" + el("item", "b"))
        + el("pts", el("item", el("x", "1")) + el("item", el("x", "2")))
    )
    m = m3("<mm:think>plan</mm:think>" + block(invoke("get_weather", body)))
    assert m.reasoning_content == "plan"
    assert calls(m) == [("get_weather", {
        "opts": {"unit": "C", "n": 1.5, "deep": {"x": 4}}, "tags": ["a", "b"], "pts": [{"x": 1}, {"x": 2}],
    })]


def test_minimax_m3_children_without_schema_are_an_object() -> None:
    """Without a schema, child elements form an object of strings (duplicate keys kept in order)."""
    m = m3("</mm:think>" + block(invoke("get_weather", el("extra", el("a", "1") + el("a", "2")))))
    assert json.loads(m.tool_calls[0].function.arguments) == {"extra": {"a": "2"}}
    assert m.tool_calls[0].function.arguments == '{"extra": {"a": "1", "a": "2"}}'


def test_minimax_m3_blank_and_json_values() -> None:
    """Blank object/array elements are empty containers; a string keeps its blanks; JSON text of an object is kept."""
    body = el("opts", "") + el("tags", " ") + el("city", " x ")
    assert calls(m3("</mm:think>" + block(invoke("get_weather", body)))) == [
        ("get_weather", {"opts": {}, "tags": [], "city": " x "})
    ]
    body = el("opts", '{"unit": "F"}')
    assert calls(m3("</mm:think>" + block(invoke("get_weather", body)))) == [("get_weather", {"opts": {"unit": "F"}})]


def test_minimax_m3_several_calls_no_argument_call_and_text_after() -> None:
    """Several invokes are parallel calls; an invoke without elements has ``{}``; text after the block is content."""
    m = m3("</mm:think>Let me check." + block(invoke("ping", ""), invoke("get_weather", el("city", "Rome"))) + "\nDone.")
    assert calls(m) == [("ping", {}), ("get_weather", {"city": "Rome"})]
    assert m.content == "Let me check.\nDone."


def test_minimax_m3_missing_closers_are_tolerated() -> None:
    """A value ends at any tag; an enclosing close tag closes what is open; a new invoke ends the previous call."""
    body = el("city", "a")[: -len(f"{M}</city>")] + el("days", "2")
    body += f"{M}<opts>{M}<unit>C{M}</opts>"
    text = f'</mm:think>{M}<tool_call>\n{M}<invoke name="get_weather">{body}\n{M}<invoke name="ping">{M}</tool_call>'
    assert calls(m3(text)) == [("get_weather", {"city": "a", "days": 2, "opts": {"unit": "C"}}), ("ping", {})]


def test_minimax_m3_unknown_name_is_filtered() -> None:
    """A call to a tool the request did not offer is not emitted; its text is surfaced."""
    m = m3("</mm:think>" + block(invoke("rm", el("a", "1"))))
    assert calls(m) == []
    assert 'name="rm"' in (m.content or "")


@pytest.mark.parametrize(
    ("tail", "want", "surfaced"),
    [
        (f'{M}<invoke name="get_weather">{M}<city>Par', [("get_weather", {"city": "Par"})], ""),
        (f'{M}<invoke name="get_weather">{M}<days>3', [("get_weather", {"days": 3})], ""),
        (f'{M}<invoke name="get_weather">{M}<days>3{M}</days>{M}<opts>{M}<n>1.', [("get_weather", {"days": 3, "opts": {}})], "1."),
        # junk before any element: the arguments never began, so no call; all of it is content
        (f'{M}<invoke name="get_weather">junk{M}</invoke>', [], '<invoke name="get_weather">junk'),
        (f'{M}<invoke name="get_weather"{M}</invoke>', [], "invoke"),
        ("prose", [], "prose"),
    ],
    ids=["cut-string", "cut-integer", "cut-number-in-object", "junk-in-body", "broken-header", "no-invoke"],
)
def test_minimax_m3_malformed_and_cut_payloads(tail: str, want: list[tuple[str, Any]], surfaced: str) -> None:
    """A cut or malformed block completes a committed call and surfaces what it cannot use; nothing is lost."""
    m = m3(f"</mm:think>{M}<tool_call>\n{tail}")
    assert calls(m) == want
    assert surfaced in (m.content or "")


def test_minimax_m3_stray_marker_is_text() -> None:
    """A marker that does not open a block is content."""
    text = f"</mm:think>Hello ]<] world {M} x"
    assert m3(text).content == f"Hello ]<] world {M} x"


def test_minimax_m3_reasoning_and_call_in_one_chunk() -> None:
    """Reasoning and a call in one chunk; thinking disabled leaves ``<mm:think>`` text alone."""
    text = "<mm:think>Let me check</mm:think>" + block(invoke("get_weather", el("city", "Tokyo")))
    got = accumulate(feed_chunks([text], tool_parser="minimax_m3", reasoning_parser="minimax_m3", tools=TOOLS))
    assert got.reasoning_content == "Let me check"
    assert calls(got) == [("get_weather", {"city": "Tokyo"})]
    off = m3("Hi" + block(invoke("ping", "")), enable_thinking=False)
    assert off.content == "Hi" and calls(off) == [("ping", {})]


def test_minimax_m3_streams_string_values_before_their_end() -> None:
    """A string value's text is emitted before its close tag arrives (only a partial marker is held)."""
    p = ResponseParser(tool_parser="minimax_m3", reasoning_parser="minimax_m3", tools=TOOLS)
    head = "</mm:think>" + f'{M}<tool_call>\n{M}<invoke name="get_weather">{M}<city>Par'
    deltas = p.feed(head) + p.feed("is]<]mini")
    args = "".join(tc.function.arguments or "" for d in deltas for tc in (d.tool_calls or []) if tc.function)
    assert args.endswith('"city": "Paris')


def test_minimax_m3_long_blank_runs_are_bounded() -> None:
    """Blank runs between elements and at an element's start are bounded holds; the result does not change."""
    body = el("city", " " * 300 + "x") + " " * 300 + el("days", "1")
    m = m3("</mm:think>" + block(invoke("get_weather", body)))
    assert calls(m) == [("get_weather", {"city": " " * 300 + "x", "days": 1})]


def test_parse_complete_agrees_with_the_vector_shape() -> None:
    """The llama.cpp MiniMax-M3 shape with thinking on parses to content, reasoning and the call."""
    text = f"<mm:think>Thinking about it</mm:think>Let me call the function.{block(invoke('html', el('n', '1')))}"
    m = parse_complete(text, tool_parser="minimax_m3", reasoning_parser="minimax_m3", tools=TOOLS)
    assert (m.content, m.reasoning_content, calls(m)) == ("Let me call the function.", "Thinking about it", [("html", {"n": 1})])
