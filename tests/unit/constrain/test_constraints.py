"""deltaflow.constrain: layouts for every dialect, type normalization, strict tools, bounded whitespace."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grammar_check import encode, gbnf_accepts, qwen3_specials, special_markers

import deltaflow
import deltaflow.request
from deltaflow import UnsupportedConstraintError, constrain, parse_complete, prepare_request
from deltaflow.constrain import layouts, render_tool_calls, supported_constraint_dialects, unconstrainable_dialects
from deltaflow.parsers import registry

llguidance = pytest.importorskip("llguidance", reason="llguidance is not installed (pip install deltaflow[grammar])")


def tool(name: str, props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """An OpenAI tool definition."""
    params: dict[str, Any] = {"type": "object", "properties": props}
    if required is not None:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "parameters": params, **extra}}


@pytest.fixture(scope="module")
def tok(shared: Path) -> Any:
    return llguidance.LLTokenizer(gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read())


def lark_ok(tok: Any, c: Any, text: str) -> bool:
    """The constraint's Lark grammar (qwen3's special tokens as such) accepts ``text``."""
    grammar = c.lark_grammar(qwen3_specials(tok, c.markers))
    m = llguidance.LLMatcher(tok, llguidance.grammar_from("lark", grammar), log_level=0)
    assert not m.is_error(), m.get_error()
    return bool(m.consume_tokens(encode(tok, text, special_markers(grammar)))) and m.is_accepting()


def both_ok(tok: Any, c: Any, text: str) -> bool:
    """The Lark and the GBNF grammar agree on ``text``; returns their verdict."""
    lark, gbnf = lark_ok(tok, c, text), gbnf_accepts(c.gbnf, text)
    assert lark == gbnf, (lark, gbnf, text)
    return lark


def calls_of(text: str, dialect: str, tools: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    msg = parse_complete(text, tool_parser=dialect, tools=tools)
    return [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]


# ----------------------------------------------------------------- the package and its compatibility module


def test_request_module_reexports_the_package() -> None:
    for name in deltaflow.request.__all__:
        assert getattr(deltaflow.request, name) is getattr(constrain, name)
    assert deltaflow.prepare_request is constrain.prepare_request
    assert deltaflow.ToolConstraint is constrain.ToolConstraint
    assert "moved" in (deltaflow.request.__doc__ or "")


# ----------------------------------------------------------------- every dialect: a layout or a reason


def test_every_registered_dialect_has_a_layout_or_a_declared_reason() -> None:
    for name in registry.tool_dialect_names():
        if layouts.layout_of(name) is not None:
            assert name in supported_constraint_dialects()
        else:
            assert layouts.UNSUPPORTED.get(name), f"{name}: neither a layout nor a declared reason"
    assert unconstrainable_dialects() == {n: layouts.UNSUPPORTED[n] for n in registry.tool_dialect_names()
                                          if layouts.layout_of(n) is None}
    # the eight dialects that had no layout before
    for name in ("command_r7b", "functionary_v3_2", "gemma4", "gigachat3", "kimi_k3", "minicpm5", "minimax_m3",
                 "step3"):
        assert name in supported_constraint_dialects()


@contextlib.contextmanager
def _scratch(reason: str | None) -> Iterator[str]:
    """A registered dialect without a layout, declared unconstrainable with ``reason`` (removed afterwards).

    Hermes' parser built by hand (no format): nothing to derive a layout from."""
    hermes = registry.get_tool_dialect("hermes")
    d = registry.register_tool_dialect(dataclasses.replace(hermes, name="scratch_unconstrainable", format=None))
    if reason is not None:
        layouts.UNSUPPORTED[d.name] = reason
    try:
        yield d.name
    finally:
        registry._TOOL.pop(d.name, None)
        layouts.UNSUPPORTED.pop(d.name, None)


def test_each_unconstrainable_dialect_raises_its_reason() -> None:
    tools = [tool("f", {"q": {"type": "string"}})]
    with _scratch("its arguments are base64 blobs no grammar of ours expresses") as name:
        table = unconstrainable_dialects()
        assert table[name] == "its arguments are base64 blobs no grammar of ours expresses"
        for dialect, reason in table.items():
            for choice in ("required", {"type": "function", "function": {"name": "f"}}):
                with pytest.raises(UnsupportedConstraintError) as exc:
                    prepare_request(tools, choice, tool_parser=dialect)
                assert repr(dialect) in str(exc.value) and reason in str(exc.value)
                assert "cannot constrain" in str(exc.value)
            with pytest.raises(UnsupportedConstraintError, match=reason):
                render_tool_calls(dialect, [("f", {"q": "x"})], tools)
            assert prepare_request(tools, "auto", tool_parser=dialect).constraint is None
    with _scratch(None) as name:  # registered, no layout, no declared reason: a generic one
        assert "no constrained-decoding layout" in unconstrainable_dialects()[name]


def test_functionary_v3_2_has_no_lazy_constraint() -> None:
    tools = [tool("f", {"q": {"type": "string"}}, ["q"])]
    assert "functionary_v3_2" in layouts.NO_LAZY
    assert prepare_request(tools, "auto", tool_parser="functionary_v3_2").constraint is None
    c = prepare_request(tools, "required", tool_parser="functionary_v3_2").constraint
    assert c is not None and not c.lazy


def test_tool_names_a_dialect_cannot_write_are_refused() -> None:
    with pytest.raises(UnsupportedConstraintError, match="'gemma4'.*'ns:f'"):
        prepare_request([tool("ns:f", {})], "required", tool_parser="gemma4")
    with pytest.raises(UnsupportedConstraintError, match="'functionary_v3_2'.*'9f'"):
        prepare_request([tool("9f", {})], "required", tool_parser="functionary_v3_2")


# ----------------------------------------------------------------- type aliases: parser, grammar and renderer agree


@pytest.mark.shared
@pytest.mark.parametrize("dialect", ["qwen3_coder", "glm45", "minimax_m2", "deepseek_v32", "step3", "minicpm5",
                                     "kimi_k3", "minimax_m3", "gemma4", "hermes", "pythonic"])
def test_type_aliases_read_as_the_parsers_read_them(tok: Any, dialect: str) -> None:
    """Regression: ``{"type": "str"}`` on qwen3_coder was a JSON string in the grammar and the renderer
    (``"hello"``) and raw text to the parser (``{"q": "\\"hello\\""}``); now all three read it as a string."""
    tools = [tool("f", {"q": {"type": "str"}, "n": {"type": "int"}, "b": {"type": "bool"}, "x": {"type": "float"}},
                  ["q"])]
    c = prepare_request(tools, "required", tool_parser=dialect).constraint
    assert c is not None
    args = {"q": "hello", "n": 5, "b": True, "x": 1.5}
    text = render_tool_calls(dialect, [("f", args)], tools)
    assert '"hello"' not in text or dialect in ("hermes", "pythonic")
    assert both_ok(tok, c, text), text
    assert calls_of(text, dialect, tools) == [("f", args)]


def test_schemas_given_to_json_grammars_are_normalized() -> None:
    tools = [tool("f", {"d": {"type": "dict", "properties": {"k": {"type": "list", "items": {"type": "str"}}}}})]
    c = prepare_request(tools, "required", tool_parser="hermes").constraint
    assert c is not None and c.legacy_structural_tag is not None
    schema = c.legacy_structural_tag["structures"][0]["schema"]
    assert schema["properties"]["d"] == {"type": "object", "properties": {"k": {"type": "array",
                                                                                "items": {"type": "string"}}}}
    assert '"type": "str"' not in c.lark


# ----------------------------------------------------------------- strict tools


@pytest.mark.shared
def test_strict_tools_allow_no_other_keys(tok: Any) -> None:
    props = {"q": {"type": "string"}, "o": {"type": "object", "properties": {"a": {"type": "integer"}}}}
    loose = tool("loose", props, ["q"])
    strict = tool("tight", props, ["q"], strict=True)
    anthropic = {"name": "anth", "input_schema": {"type": "object", "properties": props}, "strict": True}
    tools = [loose, strict, anthropic]
    r = prepare_request(tools, "required", tool_parser="hermes")
    assert r.strict_tools == {"tight", "anth"}
    c = r.constraint
    assert c is not None and c.legacy_structural_tag is not None
    schemas = {s["begin"].split('"name": ')[1].split('"')[1]: s["schema"] for s in c.legacy_structural_tag["structures"]}
    assert "additionalProperties" not in schemas["loose"]
    assert schemas["tight"]["additionalProperties"] is False
    assert schemas["tight"]["properties"]["o"]["additionalProperties"] is False
    for name, ok in (("loose", True), ("tight", False)):
        extra = render_tool_calls("hermes", [(name, {"q": "x", "zzz": 1})], tools)
        nested = render_tool_calls("hermes", [(name, {"q": "x", "o": {"a": 1, "b": 2}})], tools)
        assert both_ok(tok, c, extra) is ok and both_ok(tok, c, nested) is ok
        assert both_ok(tok, c, render_tool_calls("hermes", [(name, {"q": "x", "o": {"a": 1}})], tools))
    # a generator of tools is read once for both purposes
    assert prepare_request(iter(tools), "required", tool_parser="hermes").strict_tools == {"tight", "anth"}


# ----------------------------------------------------------------- bounded whitespace


@pytest.mark.shared
def test_whitespace_is_bounded(tok: Any) -> None:
    tools = [tool("f", {"q": {"type": "string"}}, ["q"])]
    c = prepare_request(tools, "required", tool_parser="hermes").constraint
    assert c is not None
    call = render_tool_calls("hermes", [("f", {"q": "x"})], tools)
    assert both_ok(tok, c, "\n" * 8 + call) and not both_ok(tok, c, "\n" * 9 + call)
    assert lark_ok(tok, c, call.replace('"q": ', '"q":' + " " * 20))
    assert not lark_ok(tok, c, call.replace('"q": ', '"q":' + " " * 21))
    assert gbnf_accepts(c.gbnf, call.replace('"q": ', '"q":' + " " * 20))
    assert not gbnf_accepts(c.gbnf, call.replace('"q": ', '"q":' + " " * 21))
    st = c.structural_tag
    assert st is not None and st["format"]["elements"][0] == {"type": "regex", "pattern": "[ \\t\\r\\n]{0,8}"}


# ----------------------------------------------------------------- the new layouts, beyond the common tests


@pytest.mark.shared
def test_gigachat3_accepts_both_generations(tok: Any) -> None:
    tools = [tool("f", {"q": {"type": "string"}}, ["q"])]
    c = prepare_request(tools, "required", tool_parser="gigachat3").constraint
    assert c is not None and c.triggers == ("<|message_sep|>", "<|function_call|>") and not c.parallel
    v3 = render_tool_calls("gigachat3", [("f", {"q": "x"})], tools)
    assert v3 == '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "f", "arguments": {"q": "x"}}'
    v31 = '<|function_call|>{"name": "f", "arguments": {"q": "x"}}'
    for text in (v3, v31):
        assert both_ok(tok, c, text) and calls_of(text, "gigachat3", tools) == [("f", {"q": "x"})]
    st = c.structural_tag
    assert st is not None and st["format"]["elements"][-1]["type"] == "or"
    legacy = c.legacy_structural_tag
    assert legacy is not None and [s["begin"][:17] for s in legacy["structures"]] == [
        "<|message_sep|>\n\n", '<|function_call|>']


@pytest.mark.shared
def test_minicpm5_cdata_values(tok: Any) -> None:
    tools = [tool("html", {"markup": {"type": "string"}, "n": {"type": "integer"}}, ["markup"])]
    c = prepare_request(tools, "required", tool_parser="minicpm5").constraint
    assert c is not None
    for value in ("<b>bold</b>", "a </param> b", "<![CDATA[x"):
        text = render_tool_calls("minicpm5", [("html", {"markup": value, "n": 2})], tools)
        assert both_ok(tok, c, text), text
        assert calls_of(text, "minicpm5", tools) == [("html", {"markup": value, "n": 2})]
    assert "<![CDATA[a </param> b]]>" in render_tool_calls("minicpm5", [("html", {"markup": "a </param> b"})], tools)
    bare = '<function name="html"><param name="markup">a </param> b</param></function>'
    assert not both_ok(tok, c, bare)


@pytest.mark.shared
def test_kimi_k3_types_each_value(tok: Any) -> None:
    tools = [tool("f", {"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "z": {"type": "null"},
                        "o": {"type": "object"}}, ["v"])]
    c = prepare_request(tools, "required", tool_parser="kimi_k3").constraint
    assert c is not None
    for args in ({"v": "42"}, {"v": 42, "z": None, "o": {"a": [1]}}):
        text = render_tool_calls("kimi_k3", [("f", args)], tools)
        assert both_ok(tok, c, text) and calls_of(text, "kimi_k3", tools) == [("f", args)]
    assert 'type="string"<|sep|>42' in render_tool_calls("kimi_k3", [("f", {"v": "42"})], tools)
    assert 'type="number"<|sep|>42' in render_tool_calls("kimi_k3", [("f", {"v": 42})], tools)
    wrong = render_tool_calls("kimi_k3", [("f", {"v": 42})], tools).replace('type="number"', 'type="boolean"')
    assert not both_ok(tok, c, wrong)
    st = c.structural_tag
    assert st is not None and "any_text" in json.dumps(st)


@pytest.mark.shared
def test_minimax_m3_nested_elements(tok: Any) -> None:
    tools = [tool("f", {"opts": {"type": "object", "properties": {"unit": {"type": "string"}, "n": {"type": "number"}}},
                        "tags": {"type": "array", "items": {"type": "string"}}, "city": {"type": "string"}})]
    c = prepare_request(tools, "required", tool_parser="minimax_m3").constraint
    assert c is not None
    args = {"opts": {"unit": "C", "n": 1.5}, "tags": ["a", "b"], "city": " x "}
    text = render_tool_calls("minimax_m3", [("f", args)], tools)
    m = layouts.LAYOUTS["minimax_m3"].prefix[:13]
    assert f"{m}<tags>{m}<item>a{m}</item>{m}<item>b{m}</item>{m}</tags>" in text
    assert both_ok(tok, c, text) and calls_of(text, "minimax_m3", tools) == [("f", args)]
    assert not both_ok(tok, c, text.replace(f"{m}<item>a", f"{m}<item>a{m}"))


@pytest.mark.shared
def test_gemma4_serialization(tok: Any) -> None:
    tools = [tool("f", {"s": {"type": "string"}, "o": {"type": "object", "properties": {"k k": {"type": "boolean"}}},
                        "l": {"type": "array", "items": {"type": "integer"}}, "z": {"type": ["string", "null"]},
                        "any": {}}, ["s"])]
    c = prepare_request(tools, "required", tool_parser="gemma4").constraint
    assert c is not None and c.structural_tag is None  # no XGrammar form
    args = {"s": "Paris, <b>", "o": {"k k": True}, "l": [1, -2], "z": None, "any": {"x": [1, "y"]}}
    text = render_tool_calls("gemma4", [("f", args)], tools)
    assert text.startswith('<|tool_call>call:f{s:<|"|>Paris, <b><|"|>,o:{<|"|>k k<|"|>:true},l:[1,-2],z:null')
    assert both_ok(tok, c, text) and calls_of(text, "gemma4", tools) == [("f", args)]
    assert not both_ok(tok, c, text.replace("l:[1,-2]", 'l:[<|"|>1<|"|>]'))


@pytest.mark.shared
def test_command_r7b_template_layout(tok: Any) -> None:
    tools = [tool("special_function", {"arg1": {"type": "integer"}}, ["arg1"])]
    c = prepare_request(tools, "required", tool_parser="command_r7b").constraint
    assert c is not None
    text = render_tool_calls("command_r7b", [("special_function", {"arg1": 1})] * 2, tools)
    assert text.startswith('<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_function", '
                           '"parameters": {"arg1": 1}},\n    {"tool_call_id": "1"')
    assert both_ok(tok, c, text) and calls_of(text, "command_r7b", tools) == [("special_function", {"arg1": 1})] * 2
    too_long_id = text.replace('"tool_call_id": "0"', '"tool_call_id": "0123456789"')
    assert not both_ok(tok, c, too_long_id)


def test_structural_tags_of_the_new_xml_layouts_use_one_tag_per_parameter() -> None:
    tools = [tool("f", {"q": {"type": "string"}, "n": {"type": "integer"}}, ["q"])]
    for dialect in ("step3", "minicpm5", "kimi_k3", "minimax_m3"):
        c = prepare_request(tools, "required", tool_parser=dialect).constraint
        assert c is not None and c.structural_tag is not None
        dumped = json.dumps(c.structural_tag)
        assert '"any_text"' in dumped and '"json_schema"' in dumped and '"style"' not in dumped
        lazy = prepare_request(tools, "auto", tool_parser=dialect).constraint
        assert lazy is not None and lazy.structural_tag is not None
        assert lazy.structural_tag["format"]["type"] == "triggered_tags"
