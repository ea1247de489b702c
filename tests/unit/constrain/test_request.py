"""deltaflow.prepare_request: tool_choice validation and per-dialect constraints checked by llguidance."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grammar_check import encode, special_markers

import deltaflow
from deltaflow import ToolChoiceError, UnsupportedConstraintError, parse_complete, prepare_request
from deltaflow.constrain.layouts import NO_LAZY
from deltaflow.parsers import registry
from deltaflow.request import ToolConstraint, render_tool_calls, supported_constraint_dialects

llguidance = pytest.importorskip("llguidance", reason="llguidance is not installed (pip install deltaflow[grammar])")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
SEARCH = {  # Anthropic form
    "name": "search",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}
OTHER = {"name": "delete_all", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}
TOOLS = [WEATHER, SEARCH]
DIALECTS = supported_constraint_dialects()


@pytest.fixture(scope="module")
def tok(shared: Path) -> Any:
    return llguidance.LLTokenizer(gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read())


def specials(tok: Any, c: ToolConstraint) -> list[str]:
    """The markers of the format that are special tokens in this tokenizer (written <marker> in Lark)."""
    out = []
    for m in c.markers:
        ids = tok.tokenize_str(m)
        if len(ids) == 1 and tok.is_special_token(ids[0]) and m.startswith("<"):
            out.append(m)
    return out


def accepts(tok: Any, grammar: str, text: str) -> bool:
    m = llguidance.LLMatcher(tok, llguidance.grammar_from("lark", grammar), log_level=0)
    assert not m.is_error(), m.get_error()
    return bool(m.consume_tokens(encode(tok, text, special_markers(grammar)))) and m.is_accepting()


def calls_of(text: str, dialect: str, tools: list[dict[str, Any]] = TOOLS) -> list[tuple[str, Any]]:
    msg = parse_complete(text, tool_parser=dialect, tools=tools)
    return [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]


@contextlib.contextmanager
def _scratch_dialect() -> Iterator[str]:
    """A registered dialect with no constraint layout (Hermes' parser without its format; removed afterwards)."""
    hermes = registry.get_tool_dialect("hermes")
    d = registry.register_tool_dialect(dataclasses.replace(hermes, name="scratch_no_layout", format=None))
    try:
        yield d.name
    finally:
        registry._TOOL.pop(d.name, None)


def expected(dialect: str, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """xml_tools values are text whatever the schema type (dialects.md section 13)."""
    if dialect != "xml_tools":
        return calls
    return [(n, {k: v if isinstance(v, str) else json.dumps(v) for k, v in a.items()}) for n, a in calls]


# ----------------------------------------------------------------- tool_choice


def test_exports() -> None:
    assert deltaflow.prepare_request is prepare_request
    assert issubclass(UnsupportedConstraintError, ValueError)
    assert issubclass(ToolChoiceError, deltaflow.DeltaflowError)


def test_none_turns_parsing_off() -> None:
    r = prepare_request(TOOLS, "none", tool_parser="hermes")
    assert (r.mode, r.tool_parser_enabled, r.constraint, r.allowed_names) == ("none", False, None, frozenset())
    assert r.parse_tools is None
    assert prepare_request(TOOLS, {"type": "none"}, tool_parser="hermes").mode == "none"
    assert prepare_request(None, None, tool_parser="hermes").mode == "none"


def test_auto_is_lazy() -> None:
    r = prepare_request(TOOLS, None, tool_parser="hermes")
    assert r.mode == "auto" and r.tool_parser_enabled and r.allowed_names == {"get_weather", "search"}
    assert r.constraint is not None and r.constraint.lazy and r.constraint.triggers == ("<tool_call>",)
    st = r.constraint.structural_tag
    assert st is not None and st["format"]["type"] == "triggered_tags" and not st["format"]["at_least_one"]
    assert prepare_request(TOOLS, {"type": "auto"}, tool_parser="hermes", lazy_auto=False).constraint is None
    # auto on a dialect without a layout: no constraint, no error
    with _scratch_dialect() as name:
        assert prepare_request(TOOLS, "auto", tool_parser=name).constraint is None
        with pytest.raises(UnsupportedConstraintError, match=f"tool parser '{name}' cannot constrain"):
            prepare_request(TOOLS, "required", tool_parser=name)


def test_required_and_named_forms() -> None:
    for choice in ("required", {"type": "any"}):
        r = prepare_request(TOOLS, choice, tool_parser="hermes")
        assert r.mode == "required" and r.constraint is not None and not r.constraint.lazy
    for choice in ({"type": "function", "function": {"name": "search"}}, {"type": "tool", "name": "search"}):
        r = prepare_request(TOOLS, choice, tool_parser="hermes")
        assert (r.mode, r.function_name, r.allowed_names) == ("named", "search", frozenset({"search"}))
        assert r.parse_tools is not None and [t["name"] for t in r.parse_tools] == ["search"]
        assert r.constraint is not None and "get_weather" not in r.constraint.lark
    r = prepare_request(TOOLS, {"type": "any", "disable_parallel_tool_use": True}, tool_parser="hermes")
    assert not r.parallel_tool_calls and r.constraint is not None
    st = r.constraint.structural_tag
    assert st is not None and st["format"]["elements"][-1]["stop_after_first"]


def test_legacy_structural_tag_shape() -> None:
    r = prepare_request(TOOLS, "required", tool_parser="hermes")
    assert r.constraint is not None
    assert r.constraint.legacy_structural_tag == {
        "type": "structural_tag",
        "structures": [
            {
                "begin": '<tool_call>\n{"name": "get_weather", "arguments": ',
                "schema": WEATHER["function"]["parameters"],  # type: ignore[index]
                "end": "}\n</tool_call>",
            },
            {"begin": '<tool_call>\n{"name": "search", "arguments": ', "schema": SEARCH["input_schema"],
             "end": "}\n</tool_call>"},
        ],
        "triggers": ["<tool_call>"],
    }
    r2 = prepare_request(TOOLS, "required", tool_parser="qwen3_coder")
    assert r2.constraint is not None and r2.constraint.legacy_structural_tag is None


@pytest.mark.parametrize(
    ("choice", "match"),
    [
        ({"type": "function", "function": {"name": "nope"}}, "'nope', which is not among the tools"),
        ({"type": "tool", "name": "nope"}, "not among the tools"),
        ("sometimes", "unknown tool_choice 'sometimes'"),
        ({"type": "banana"}, "unknown tool_choice type 'banana'"),
        ({"type": "function"}, "needs function.name"),
        (42, "must be a string or an object"),
    ],
)
def test_bad_tool_choice(choice: Any, match: str) -> None:
    with pytest.raises(ToolChoiceError, match=match):
        prepare_request(TOOLS, choice, tool_parser="hermes")


def test_required_without_tools() -> None:
    with pytest.raises(ToolChoiceError, match="non-empty tools"):
        prepare_request([], "required", tool_parser="hermes")


def test_unknown_parser_and_bad_tools() -> None:
    with pytest.raises(deltaflow.UnknownParserError):
        prepare_request(TOOLS, "required", tool_parser="nope")
    with pytest.raises(deltaflow.ToolSpecError):
        prepare_request([{"bad": 1}], "required", tool_parser="hermes")


def test_every_registered_dialect_gives_a_spec_or_a_clear_error() -> None:
    for name in registry.tool_dialect_names():
        try:
            r = prepare_request(TOOLS, "required", tool_parser=name)
        except UnsupportedConstraintError as exc:
            assert repr(name) in str(exc) and "cannot constrain" in str(exc)
            assert name not in DIALECTS
        else:
            assert r.constraint is not None and name in DIALECTS


def test_pythonic_object_parameter_is_refused() -> None:
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {"o": {"type": "object"}}}}]
    with pytest.raises(UnsupportedConstraintError, match="'pythonic'.*'o'"):
        prepare_request(tools, "required", tool_parser="pythonic")


def test_reasoning_end_is_exposed() -> None:
    r = prepare_request(TOOLS, "required", tool_parser="hermes", reasoning_parser="qwen3")
    assert r.reasoning_end == "</think>" and r.constraint is not None
    assert r.constraint.after_reasoning_end == "</think>"
    off = prepare_request(TOOLS, "required", tool_parser="hermes", reasoning_parser="qwen3", enable_thinking=False)
    assert off.reasoning_end is None and off.constraint is not None and off.constraint.after_reasoning_end is None
    # DeepSeek-V3.1's hybrid reasoning is off by default
    ds = prepare_request(TOOLS, "required", tool_parser="deepseek_v31", reasoning_parser="deepseek_v3")
    assert ds.reasoning_end is None
    assert prepare_request(TOOLS, "required", tool_parser="deepseek_v31", reasoning_parser="deepseek_v3",
                           enable_thinking=True).reasoning_end == "</think>"


def test_token_reasoning_finds_where_the_constraint_starts(shared: Path) -> None:
    """The documented hand-off: TokenReasoning on ids says when to switch the constraint on."""
    tokenizers = pytest.importorskip("tokenizers")
    from deltaflow.parsers.token_reasoning import TokenReasoning

    hf = tokenizers.Tokenizer.from_str(gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read())
    r = prepare_request(TOOLS, "required", tool_parser="hermes", reasoning_parser="qwen3")
    assert r.reasoning_end is not None
    tr = TokenReasoning(hf.token_to_id(r.reasoning_end), starts_open=True)
    ids = hf.encode("why</think>", add_special_tokens=False).ids
    assert not tr.is_reasoning_end(ids[:-1]) and tr.is_reasoning_end(ids)


# ----------------------------------------------------------------- llguidance, per dialect


def _canonical(dialect: str, multi: bool) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    calls: list[tuple[str, dict[str, Any]]] = [("get_weather", {"city": "Paris </b> & <x>", "days": 3})]
    if multi:
        calls.append(("search", {"query": "two\nlines"}))
    return render_tool_calls(dialect, calls, TOOLS), calls


@pytest.mark.shared
@pytest.mark.parametrize("dialect", DIALECTS)
def test_canonical_output_is_accepted_and_parses_back(tok: Any, dialect: str) -> None:
    r = prepare_request(TOOLS, "required", tool_parser=dialect)
    c = r.constraint
    assert c is not None
    grammar = c.lark_grammar(specials(tok, c))
    text, calls = _canonical(dialect, c.parallel)
    assert accepts(tok, grammar, text), text
    assert calls_of(text, dialect) == expected(dialect, calls)
    # the whitespace a template puts after the reasoning end may come first
    assert accepts(tok, grammar, "\n\n" + text)
    # a single call with only the required argument, too
    one = render_tool_calls(dialect, [("search", {"query": "x"})], TOOLS)
    assert accepts(tok, grammar, one) and calls_of(one, dialect) == [("search", {"query": "x"})]


@pytest.mark.shared
@pytest.mark.parametrize("dialect", DIALECTS)
def test_bad_outputs_are_rejected(tok: Any, dialect: str) -> None:
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None
    grammar = c.lark_grammar(specials(tok, c))
    unknown = render_tool_calls(dialect, [("delete_all", {"query": "x"})], [*TOOLS, OTHER])
    missing = render_tool_calls(dialect, [("get_weather", {"days": 3})], TOOLS)
    good = render_tool_calls(dialect, [("search", {"query": "x"})], TOOLS)
    trig = next(t for t in c.triggers if t in good)
    wrong_marker = good.replace(trig, trig[:-1] + "#", 1)
    assert wrong_marker != good
    for bad in (unknown, missing, wrong_marker, "Sure, here you go: " + good):
        assert not accepts(tok, grammar, bad), bad


@pytest.mark.shared
@pytest.mark.parametrize("dialect", DIALECTS)
def test_named_function_rejects_the_other_tool(tok: Any, dialect: str) -> None:
    c = prepare_request(TOOLS, {"type": "tool", "name": "search"}, tool_parser=dialect).constraint
    assert c is not None
    grammar = c.lark_grammar(specials(tok, c))
    assert accepts(tok, grammar, render_tool_calls(dialect, [("search", {"query": "x"})], TOOLS))
    assert not accepts(tok, grammar, render_tool_calls(dialect, [("get_weather", {"city": "x"})], TOOLS))


@pytest.mark.shared
@pytest.mark.parametrize(
    ("dialect", "tokenizer"),
    [("hermes", "qwen3"), ("qwen3_coder", "qwen3"), ("deepseek_v3", "deepseek-v3.1"), ("deepseek_v31", "deepseek-v3.1"),
     ("openai", "gpt-oss"), ("llama3_json", "llama3")],
)
def test_default_lark_on_the_dialects_own_tokenizer(shared: Path, dialect: str, tokenizer: str) -> None:
    """The default grammar (atomic markers as special tokens) works on the family's real vocabulary."""
    t = llguidance.LLTokenizer(gzip.open(shared / "tokenizers" / tokenizer / "tokenizer.json.gz", "rt").read())
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None
    text, _ = _canonical(dialect, c.parallel)
    assert accepts(t, c.lark, text)


@pytest.mark.shared
def test_harmony_call_after_an_analysis_message(shared: Path) -> None:
    """gpt-oss: after the analysis message ends (<|end|>), the call is a new message."""
    t = llguidance.LLTokenizer(gzip.open(shared / "tokenizers" / "gpt-oss" / "tokenizer.json.gz", "rt").read())
    r = prepare_request(TOOLS, "required", tool_parser="openai", reasoning_parser="openai_gptoss")
    assert r.constraint is not None and r.reasoning_end == "<|end|>"
    call = render_tool_calls("openai", [("search", {"query": "x"})], TOOLS)
    after = "<|start|>assistant" + call
    assert accepts(t, r.constraint.lark, after)
    full = "<|channel|>analysis<|message|>Need to search.<|end|>" + after
    msg = parse_complete(full, tool_parser="openai", reasoning_parser="openai_gptoss", tools=TOOLS)
    assert msg.reasoning_content == "Need to search."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []] == [
        ("search", {"query": "x"})
    ]


@pytest.mark.shared
def test_auto_lark_describes_the_section_from_the_trigger(tok: Any) -> None:
    r = prepare_request(TOOLS, "auto", tool_parser="qwen3_coder")
    c = r.constraint
    assert c is not None and c.lazy
    text = render_tool_calls("qwen3_coder", [("search", {"query": "x"})], TOOLS)
    assert text.startswith(c.triggers[0]) and accepts(tok, c.lark_grammar(specials(tok, c)), text)


def test_lark_special_tokens_by_id() -> None:
    c = prepare_request(TOOLS, "required", tool_parser="mistral").constraint
    assert c is not None
    assert '"[TOOL_CALLS]' in c.lark  # not <...>-shaped: text unless ids are given
    g = c.lark_grammar({"[TOOL_CALLS]": 9, "[ARGS]": 32, "[CALL_ID]": 33})
    assert "<[9]>" in g and "<[32]>" in g and "[TOOL_CALLS]" not in g
    with pytest.raises(ValueError, match="cannot be referenced by name"):
        c.lark_grammar(["[TOOL_CALLS]"])
    hermes = prepare_request(TOOLS, "required", tool_parser="hermes").constraint
    assert hermes is not None
    assert "call_1: <tool_call> " in hermes.lark  # default: atomic markers as special tokens
    assert 'call_1: "<tool_call>\\n' in hermes.lark_grammar(())  # all text


# ----------------------------------------------------------------- XGrammar (optional)


@pytest.mark.shared
# pythonic arguments and Gemma 4's serialization have no XGrammar form
@pytest.mark.parametrize("dialect", [d for d in DIALECTS if d not in ("pythonic", "llama4_pythonic", "lfm2", "olmo3",
                                                                      "gemma4")])
def test_xgrammar_structural_tag(shared: Path, dialect: str) -> None:
    xgr = pytest.importorskip("xgrammar", reason="xgrammar is optional")
    hf = pytest.importorskip("tokenizers").Tokenizer.from_str(
        gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt").read()
    )
    vocab = [""] * hf.get_vocab_size(with_added_tokens=True)
    for s, i in hf.get_vocab(with_added_tokens=True).items():
        vocab[i] = s
    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.BYTE_LEVEL)
    c = prepare_request(TOOLS, "required", tool_parser=dialect).constraint
    assert c is not None and c.structural_tag is not None
    compiled = xgr.GrammarCompiler(info).compile_structural_tag(c.structural_tag_json)
    text, _ = _canonical(dialect, c.parallel)

    def ok(t: str, grammar: Any = compiled) -> bool:
        return bool(xgr.GrammarMatcher(grammar).accept_string(t))

    assert ok(text) and ok("\n\n" + text)
    missing = render_tool_calls(dialect, [("get_weather", {"days": 3})], TOOLS)
    unknown = render_tool_calls(dialect, [("delete_all", {"query": "x"})], [*TOOLS, OTHER])
    assert not ok(missing) and not ok(unknown)
    # auto: a lazy triggered_tags format, free text first (functionary_v3_2 has none: constrain.layouts.NO_LAZY)
    if dialect in NO_LAZY:
        return
    lazy = prepare_request(TOOLS, "auto", tool_parser=dialect).constraint
    assert lazy is not None and lazy.structural_tag is not None
    lazy_compiled = xgr.GrammarCompiler(info).compile_structural_tag(lazy.structural_tag_json)
    assert ok("Let me check. " + text, lazy_compiled) and ok("No tools needed.", lazy_compiled)
    assert not ok("Let me check. " + missing, lazy_compiled)
