"""JSON-envelope dialects of the JSON-array family: Granite, Hunyuan, Jamba, xLAM, GigaChat, ERNIE, ...

No tokenizer of these families is in shared/tokenizers, so "every real token
boundary" is approximated by every two-chunk split that does not cut a marker
the dialect declares to be one token (``chunking="tokens"``), plus the
whole, per-character and random chunkings of ``check_chunkings`` (``"any"``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from deltaflow import ChatMessage, ResponseParser, accumulate, parse_complete
from deltaflow.items import Channel, ToolDelta
from deltaflow.parsers import DriverContext, JsonEnvelopeDriver, JsonEnvelopeFormat, registry
from deltaflow.parsers.spec import all_prefixes
from deltaflow.testing import check_chunkings, feed_chunks, message_key, split_at

NAMES = (
    "granite", "granite4", "granite-20b-fc", "hunyuan_a13b", "ernie45", "xlam", "jamba", "apriel",
    "nemotron", "phi4_mini_json", "firefunction_v2", "apertus", "longcat", "gigachat3",
)


def tools(*names: str) -> list[dict[str, Any]]:
    """OpenAI-format definitions of ``names`` (any arguments)."""
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]


def calls(m: ChatMessage) -> list[tuple[str, Any]]:
    """The message's calls as (name, decoded arguments)."""
    return [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls]


def envelope(name: str, args: dict[str, Any], *, keyed: bool = False) -> str:
    """One call object of the family."""
    if keyed:
        return json.dumps({name: args})
    return json.dumps({"name": name, "arguments": args})


def block(dialect: str, items: list[tuple[str, dict[str, Any]]]) -> str:
    """A well-formed tool output of ``dialect`` holding ``items``."""
    objs = [envelope(n, a, keyed=dialect == "apertus") for n, a in items]
    arr = "[" + ", ".join(objs) + "]"
    per_call = {
        "granite4": ("<tool_call>", "</tool_call>", ""),
        "ernie45": ("<tool_call>\n", "\n</tool_call>", "\n"),
        "longcat": ("<longcat_tool_call>", "</longcat_tool_call>", "\n"),
        "granite-20b-fc": ("<function_call> ", "", "\n"),
    }
    if dialect in per_call:
        head, tail, sep = per_call[dialect]
        return sep.join(head + o + tail for o in objs)
    wrapped = {
        "granite": ("<|tool_call|>", ""),
        "hunyuan_a13b": ("<tool_calls>", "</tool_calls>"),
        "jamba": ("<tool_calls>", "</tool_calls>"),
        "apriel": ("<tool_calls>", "</tool_calls>"),
        "nemotron": ("<TOOLCALL>", "</TOOLCALL>"),
        "xlam": ("<tool_call>", "</tool_call>"),
        "phi4_mini_json": ("functools", ""),
        "firefunction_v2": ("functools", ""),
        "apertus": ("<|tools_prefix|>", "<|tools_suffix|>"),
    }
    if dialect in wrapped:
        head, tail = wrapped[dialect]
        return head + arr + tail
    assert dialect == "gigachat3"
    assert len(objs) == 1
    return "<|message_sep|>\n\nfunction call<|role_sep|>\n" + objs[0]


def atomic_spans(dialect: str, text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds an opener of ``dialect`` that is declared to be one token."""
    d = registry.get_tool_dialect(dialect)
    spans = []
    for o in d.openers:
        if all(o[:k] in d.token_prefixes for k in range(1, len(o))):
            continue  # a splittable opener
        i = text.find(o)
        while i >= 0:
            spans.append((i, i + len(o)))
            i = text.find(o, i + 1)
    return spans


def check_token_splits(text: str, **kwargs: Any) -> ChatMessage:
    """Every two-chunk split that keeps the declared single-token openers whole rebuilds parse_complete."""
    want = message_key(parse_complete(text, **kwargs))
    spans = atomic_spans(kwargs["tool_parser"], text)
    for i in range(len(text) + 1):
        if any(a < i < b for a, b in spans):
            continue
        got = message_key(accumulate(feed_chunks(split_at(text, [i]), chunking="tokens", **kwargs)))
        assert got == want, f"split at {i} of {text!r}"
    return check_chunkings(text, **kwargs)


# -- declarations -------------------------------------------------------------------------------------


def test_registered_names_and_declarations() -> None:
    """Every dialect of the family is registered with its openers, markers, prefixes and families."""
    for name in NAMES:
        d = registry.get_tool_dialect(name)
        assert d.families and d.description
        assert set(d.openers) <= set(d.markers)
        watched = (*d.openers, *d.framing, *d.restart_after)
        for p in d.token_prefixes:
            assert any(o.startswith(p) and len(p) < len(o) for o in watched), (name, p)
    assert registry.get_tool_dialect("granite").openers == ("<|tool_call|>", "<tool_call>")
    assert registry.get_tool_dialect("granite").start_openers == ("[",)
    assert registry.get_tool_dialect("xlam").openers == ("<tool_call>", "[TOOL_CALLS]", "```")  # ```json via ```
    assert registry.get_tool_dialect("xlam").restart_after == ("</think>",)
    assert registry.get_tool_dialect("gigachat3").markers == (
        "<|message_sep|>", "function call", "<|role_sep|>", "</s>", "<|function_call|>",
    )


def test_single_token_openers_declare_no_prefix() -> None:
    """Openers known to be one token (vLLM matches them by id) declare no prefix; text ones declare all."""
    assert registry.get_tool_dialect("ernie45").token_prefixes == ()
    assert registry.get_tool_dialect("jamba").token_prefixes == ()
    granite = registry.get_tool_dialect("granite").token_prefixes
    assert "<|tool_call" not in granite and set(all_prefixes("<tool_call>")) == set(granite)
    assert set(registry.get_tool_dialect("hunyuan_a13b").token_prefixes) == set(all_prefixes("<tool_calls>"))


def test_all_prefixes() -> None:
    """all_prefixes lists each proper prefix once."""
    assert all_prefixes("abc", "abd") == ("a", "ab")


def test_existing_dialects_keep_their_declaration() -> None:
    """The new driver options leave Hermes, InternLM and Llama 3 JSON as they were declared."""
    for name in ("hermes", "internlm", "llama3_json"):
        d = registry.get_tool_dialect(name)
        assert len(d.openers) == 1
    spec = JsonEnvelopeFormat(open=("<a>", "<b>"), close="</a>")
    assert spec.envelopes() == ((("<a>", "<b>"), "</a>"),)
    assert spec.openers == ("<a>",) and spec.markers == ("<a>", "<b>", "</a>")


# -- well-formed outputs, every dialect ---------------------------------------------------------------

TWO = [("get_weather", {"city": "Paris", "n": [1, 2.5, {"x": None}]}), ("search", {"q": "a \"b\" \\ é 天气"})]


@pytest.mark.parametrize("dialect", NAMES)
def test_one_call_with_text_before(dialect: str) -> None:
    """Text before the block is content (blanks right before it too, unless the dialect declares them framing);
    the call's arguments are its JSON source text."""
    text = "Let me check. " + block(dialect, TWO[:1])
    m = check_token_splits(text, tool_parser=dialect)
    lead = registry.get_tool_dialect(dialect).lead_blanks
    assert m.content == ("Let me check." if lead else "Let me check. ")
    assert calls(m) == TWO[:1]


@pytest.mark.parametrize("dialect", [n for n in NAMES if n != "gigachat3"])
def test_several_calls(dialect: str) -> None:
    """Several calls (array elements or consecutive blocks) are emitted in order."""
    m = check_token_splits(block(dialect, TWO), tool_parser=dialect)
    assert calls(m) == TWO
    assert not (m.content or "").strip()


@pytest.mark.parametrize("dialect", NAMES)
def test_no_argument_call(dialect: str) -> None:
    """An empty arguments object is a call with ``{}``."""
    m = check_token_splits(block(dialect, [("refresh", {})]), tool_parser=dialect)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("refresh", "{}")]


@pytest.mark.parametrize("dialect", [n for n in NAMES if n != "gigachat3"])
def test_unknown_name_is_filtered_and_surfaced(dialect: str) -> None:
    """With tools given, a call to another name is not emitted; its text is surfaced."""
    text = block(dialect, [("get_weather", {"city": "Oslo"}), ("rm_rf", {"path": "/"})])
    m = check_chunkings(text, tool_parser=dialect, tools=tools("get_weather"))
    assert calls(m) == [("get_weather", {"city": "Oslo"})]
    assert '"rm_rf"' in (m.content or "") and '"/"' in (m.content or "")


def test_gigachat_unknown_name_is_surfaced() -> None:
    """GigaChat's single call to a name not offered stays text."""
    text = "Hi." + block("gigachat3", [("rm_rf", {})])
    m = check_chunkings(text, tool_parser="gigachat3", tools=tools("get_weather"))
    assert m.tool_calls == [] and m.content is not None and m.content.startswith("Hi.<|message_sep|>")


@pytest.mark.parametrize("dialect", NAMES)
def test_truncated_payload_on_the_final_chunk(dialect: str) -> None:
    """Output cut inside the arguments closes the named call at its last safe point; a nameless one is text."""
    full = block(dialect, [("get_weather", {"city": "Paris", "days": 3})])
    cut = full[: full.index("Paris") + 3]
    m = check_chunkings(cut, tool_parser=dialect)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_weather", '{"city": "Par"}')]
    nameless = full[: full.index("get_weather") + 3]
    m2 = check_chunkings(nameless, tool_parser=dialect)
    assert m2.tool_calls == [] and m2.content == nameless


@pytest.mark.parametrize("dialect", NAMES)
def test_malformed_arguments_close_the_call_and_surface_the_rest(dialect: str) -> None:
    """Invalid JSON after the name ends the block: the call is closed, the rest is content."""
    full = block(dialect, [("get_weather", {"city": "Paris"})])
    bad = full.replace('"Paris"', "Paris", 1)
    m = check_chunkings(bad, tool_parser=dialect)
    assert calls(m) == [("get_weather", {})]
    assert m.content is not None and m.content.startswith('"city": Paris}')


@pytest.mark.parametrize("dialect", NAMES)
def test_text_after_the_block_is_content(dialect: str) -> None:
    """Text after the block is content, kept verbatim."""
    text = block(dialect, TWO[:1]) + "Done!"
    m = check_token_splits(text, tool_parser=dialect)
    assert calls(m) == TWO[:1]
    assert m.content == "Done!"


@pytest.mark.parametrize("dialect", ["nemotron", "ernie45", "granite", "xlam", "hunyuan_a13b"])
@pytest.mark.parametrize("reasoning", ["qwen3", "deepseek_r1"])
def test_reasoning_and_tools_in_one_chunk(dialect: str, reasoning: str) -> None:
    """Reasoning, its end and a tool block arriving in one chunk are split correctly."""
    text = "<think>I should call it.</think>\n" + block(dialect, TWO)
    m = check_chunkings(text, tool_parser=dialect, reasoning_parser=reasoning, enable_thinking=True)
    assert m.reasoning_content == "I should call it."
    assert calls(m) == TWO
    one = accumulate(ResponseParser(dialect, reasoning, enable_thinking=True).feed(text, final=True))
    assert message_key(one) == message_key(m)


# -- array framing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One output and what it parses to."""

    id: str
    dialect: str
    text: str
    content: str | None
    calls: list[tuple[str, str]]


CASES = [
    Case("granite-3.1-text-marker", "granite", '<tool_call> [ {"name": "f", "arguments": {"a": [1, 2]}} ]', None,
         [("f", '{"a": [1, 2]}')]),
    Case("granite-bare-at-start", "granite", '  [{"name": "f", "arguments": {"a": 1}}]', "  ", [("f", '{"a": 1}')]),
    Case("granite-bare-in-prose-is-text", "granite", 'See [{"name": "f", "arguments": {}}]',
         'See [{"name": "f", "arguments": {}}]', []),
    Case("granite-array-of-numbers-is-text", "granite", "[1, 2]", "[1, 2]", []),
    Case("granite-empty-array-is-text", "granite", "<|tool_call|>[]", "<|tool_call|>[]", []),
    Case("array-cut-after-a-comma", "granite", '<|tool_call|>[{"name": "f", "arguments": {}},', ",", [("f", "{}")]),
    Case("array-cut-before-its-end", "hunyuan_a13b", '<tool_calls>[{"name": "f", "arguments": {}} ', " ",
         [("f", "{}")]),
    Case("junk-between-elements", "jamba", '<tool_calls>[{"name": "f", "arguments": {}} x]</tool_calls>',
         " x]</tool_calls>", [("f", "{}")]),
    Case("element-without-name", "nemotron", '<TOOLCALL>[{"arguments": {"a": 1}}]</TOOLCALL>',
         '<TOOLCALL>[{"arguments": {"a": 1}}]</TOOLCALL>', []),
    Case("second-element-without-name", "nemotron",
         '<TOOLCALL>[{"name": "f", "arguments": {}}, {"x": 1}]</TOOLCALL>', ', {"x": 1}]</TOOLCALL>',
         [("f", "{}")]),
    Case("parameters-field", "apriel", '<tool_calls>[{"name": "f", "parameters": {"a": 1}}]</tool_calls>', None,
         [("f", '{"a": 1}')]),
    Case("stringified-arguments", "hunyuan_a13b",
         '<tool_calls>[{"arguments": "{\\"a\\": 1}", "name": "f"}]</tool_calls>', None, [("f", '{"a": 1}')]),
    Case("xlam-tool-calls-tag", "xlam", 'Sure.[TOOL_CALLS][{"name": "f", "arguments": {}}]\nok', "Sure.\nok",
         [("f", "{}")]),
    Case("xlam-fence", "xlam", 'x\n```json\n[{"name": "f", "arguments": {"a": 1}}]\n```\ny', "x\ny",
         [("f", '{"a": 1}')]),
    Case("xlam-plain-fence", "xlam", '```\n[{"name": "f", "arguments": {}}]\n```', None, [("f", "{}")]),
    Case("xlam-code-fence-is-text", "xlam", "```python\nprint(1)\n```", "```python\nprint(1)\n```", []),
    Case("xlam-bracket-prose-is-text", "xlam", "[1] is a citation", "[1] is a citation", []),
    Case("apertus-two-calls", "apertus", 'a<|tools_prefix|>[{"f": {"a": 1}}, {"g": {}}]<|tools_suffix|>b', "ab",
         [("f", '{"a": 1}'), ("g", "{}")]),
    Case("apertus-second-key-is-text", "apertus", '<|tools_prefix|>[{"f": {"a": 1}, "g": {}}]<|tools_suffix|>',
         ', "g": {}}]<|tools_suffix|>', [("f", '{"a": 1}')]),
    Case("apertus-empty-object-is-text", "apertus", "<|tools_prefix|>[{}]<|tools_suffix|>",
         "<|tools_prefix|>[{}]<|tools_suffix|>", []),
    Case("gigachat31", "gigachat3", 'ok<|function_call|>{"name": "f", "arguments": {"a": 1}}</s>', "ok",
         [("f", '{"a": 1}')]),
    Case("gigachat-eos-only-after-the-call", "gigachat3", "bye</s>", "bye</s>", []),
    Case("gigachat-other-message-sep-is-text", "gigachat3", "hi<|message_sep|>bye", "hi<|message_sep|>bye", []),
    Case("ernie-newlines-after-calls", "ernie45",
         '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n\n<tool_call>\n{"name": "g", "arguments": {}}'
         "\n</tool_call>\n", None, [("f", "{}"), ("g", "{}")]),
    Case("ernie-text-after-newline", "ernie45", '<tool_call>{"name": "f", "arguments": {}}</tool_call>\nend', "end",
         [("f", "{}")]),
    Case("phi4-word-functools-in-prose", "phi4_mini_json",
         'import functools. functools[{"name": "f", "arguments": {}}]', "import functools. ", [("f", "{}")]),
    Case("granite-20b-fc-two-calls", "granite-20b-fc",
         '<function_call> {"name": "f", "arguments": {}}\n<function_call> {"name": "g", "arguments": {"x": 1}}', None,
         [("f", "{}"), ("g", '{"x": 1}')]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_framing(case: Case) -> None:
    """Array, variant and closer framing parse as declared, on every chunking."""
    m = check_token_splits(case.text, tool_parser=case.dialect)
    assert m.content == case.content
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == case.calls


# -- the driver contract -------------------------------------------------------------------------------


def _parser(spec: JsonEnvelopeFormat) -> JsonEnvelopeDriver:
    n = iter(range(100))
    return JsonEnvelopeDriver(DriverContext(Channel.CONTENT, lambda: next(n), None, "t"), spec)


ARRAY = JsonEnvelopeFormat(open=("<c>",), close="</c>", array=True)


def test_each_element_is_one_call_named_first() -> None:
    """Each element gets its own call number; its first event names it; the comma is raw text of the next."""
    p = _parser(ARRAY)
    out: list[object] = []
    text = '<c>[{"name": "f", "arguments": {"a": 1}}, {"name": "g"}]</c>tail'
    end = p.feed_tool_block(text, out, False)
    assert p.done and text[end:] == "tail"
    events = [e for e in out if isinstance(e, ToolDelta)]
    assert [e.call for e in events if e.name] == [0, 1]
    assert "".join(e.raw for e in events) == text[:end]
    assert ''.join(e.args for e in events if e.call == 1) == "{}"
    first_of_1 = next(e for e in events if e.call == 1)
    assert first_of_1.name == "g" and first_of_1.raw.startswith(", ")


def test_blanks_after_an_element_are_held_until_known() -> None:
    """Blanks after an element are not consumed until what follows them arrives."""
    p = _parser(ARRAY)
    out: list[object] = []
    text = '<c>[{"name": "f", "arguments": {}}  '
    end = p.feed_tool_block(text, out, False)
    assert not p.done and text[end:] == "  "
    end2 = p.feed_tool_block(text[end:] + "]</c>", out, False)
    assert p.done and end2 == len(text) - end + 5


def test_longest_variant_opener_wins_and_waits() -> None:
    """A partial text that may still grow into a longer opener is held."""
    spec = JsonEnvelopeFormat(open=("```",), close="```", variants=((("```json",), "```"),), array=True)
    p = _parser(spec)
    out: list[object] = []
    assert p.feed_tool_block("```js", out, False) == 0 and not p.done
    text = '```json\n[{"name": "f", "arguments": {}}]\n```'
    assert p.feed_tool_block(text, out, False) == len(text) and p.done


@pytest.mark.parametrize("blanks", [10, 256, 257, 300, 2000])
@pytest.mark.parametrize("follow", [', {"name": "rm_rf", "arguments": {}}]</tool_calls>', "]</tool_calls>", "x"])
def test_a_long_blank_run_between_elements_gives_the_same_result_on_every_chunking(blanks: int, follow: str) -> None:
    """Blanks after an array element: a run over 256 is attributed as it is read, identically on every split."""
    text = '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Oslo"}}' + " " * blanks + follow
    m = check_chunkings(text, tool_parser="hunyuan_a13b", tools=tools("get_weather"))
    assert calls(m) == [("get_weather", {"city": "Oslo"})]
    if "rm_rf" in follow:
        assert '"rm_rf"' in (m.content or "")


def test_command_r7b_action_block_with_thinking_on_every_chunking() -> None:
    """Command R7B: calls in <|START_ACTION|>[...]<|END_ACTION|> after a thinking block; the id member is read past."""
    text = (
        "<|START_THINKING|>Look it up.<|END_THINKING|><|START_ACTION|>[\n"
        '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Oslo"}},\n'
        '    {"tool_call_id": "1", "tool_name": "rm_rf", "parameters": {"path": "/"}}\n'
        "]<|END_ACTION|>"
    )
    m = check_chunkings(text, tool_parser="command_r7b", reasoning_parser="command_r7b", tools=tools("get_weather"))
    assert m.reasoning_content == "Look it up."
    assert calls(m) == [("get_weather", {"city": "Oslo"})]
    assert '"rm_rf"' in (m.content or "")


def test_command_r7b_response_wrapper_is_framing() -> None:
    """The tool parser alone drops Command R7B's response markers wherever they stand outside a call; the thinking
    block, without a reasoning parser, stays content verbatim; the markers inside a call's arguments are text."""
    text = (
        "<|START_THINKING|>Plan.<|END_THINKING|><|START_RESPONSE|>Hi <|START_RESPONSE|>there<|END_RESPONSE|>"
        '<|START_ACTION|>[{"tool_name": "get_weather", "parameters": {"q": "<|END_RESPONSE|>"}}]<|END_ACTION|>'
    )
    m = check_chunkings(text, tool_parser="command_r7b")
    assert m.content == "<|START_THINKING|>Plan.<|END_THINKING|>Hi there"
    assert calls(m) == [("get_weather", {"q": "<|END_RESPONSE|>"})]
    m = check_chunkings("<|START_RESPONSE|>Hi<|END_RESPONSE|>", tool_parser="command_r7b", reasoning_parser="command_r7b")
    assert (m.content, m.reasoning_content) == ("Hi", None)


def test_xlam_array_after_its_thinking() -> None:
    """xLAM-2 may think before its array: after ``</think>`` (and blanks) a bare ``[`` opens a block again; the
    thinking stays content without a reasoning parser; other text after ``</think>`` keeps ``[`` as text."""
    arr = '[{"name": "get_weather", "arguments": {"city": "Oslo"}}]'
    m = check_token_splits("<think>Look it up.</think>\n" + arr, tool_parser="xlam")
    assert (m.content, calls(m)) == ("<think>Look it up.</think>", [("get_weather", {"city": "Oslo"})])
    m = check_token_splits("<think>x</think> see " + arr, tool_parser="xlam")
    assert (m.content, calls(m)) == ("<think>x</think> see " + arr, [])
    m = check_chunkings("<think>x</think>" + arr, tool_parser="xlam", reasoning_parser="qwen3")
    assert (m.reasoning_content, m.content, calls(m)) == ("x", None, [("get_weather", {"city": "Oslo"})])
