"""Protocols from llama.cpp: ``functionary_v3_1`` (``<function=NAME>{json}</function>``), ``functionary_v3_2``
(recipient lines) and ``command_r_plus``."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from deltaflow import accumulate, parse_complete, prepare_request
from deltaflow.parsers import registry
from deltaflow.parsers.spec import all_prefixes
from deltaflow.presets import resolve_model
from deltaflow.testing import check_chunkings, feed_chunks, load_tokenizer, message_key, split_at


def tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool definition with the given property schemas."""
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


TOOLS = [
    tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}),
    tool("ping", {}),
    tool("python", {"code": {"type": "string"}}),
]


def calls(m: Any) -> list[tuple[str, Any]]:
    """The message's calls as (name, decoded arguments), each a JSON object."""
    out = []
    for c in m.tool_calls or []:
        args = json.loads(c.function.arguments)
        assert isinstance(args, dict)
        out.append((c.function.name, args))
    return out


def crp(text: str, **kw: Any) -> Any:
    """A Command R+ output, checked on every chunking in both modes (every marker prefix is declared)."""
    kw.setdefault("tools", TOOLS)
    check_chunkings(text, tool_parser="command_r_plus", chunking="tokens", **kw)
    return check_chunkings(text, tool_parser="command_r_plus", **kw)


def any_mode(text: str, **kw: Any) -> Any:
    """A Functionary v3.1 output on every chunking ("any" mode: chars chunking splits inside ``<function=``)."""
    kw.setdefault("tools", TOOLS)
    return check_chunkings(text, tool_parser="functionary_v3_1", **kw)


# -- registration ---------------------------------------------------------------------------------


def test_registered_declarations() -> None:
    """Both dialects are registered with their openers, markers and declared prefixes."""
    f = registry.get_tool_dialect("functionary_v3_1")
    assert f.openers == ("<function=",)
    assert set(f.markers) == {"<function=", "</function>"}
    assert f.token_prefixes == ("<", "<function") and f.tokenizers == ("llama3",)
    c = registry.get_tool_dialect("command_r_plus")
    assert c.openers == ("Action:",)
    assert set(c.markers) == {"Action:", "```json", "```"}
    assert c.framing == ("<|START_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>")
    assert c.token_prefixes == all_prefixes("Action:", *c.framing)


def test_presets() -> None:
    """The known model ids resolve to these parsers."""
    assert resolve_model("meetkai/functionary-medium-v3.1").tool_parser == "functionary_v3_1"
    assert resolve_model("CohereForAI/c4ai-command-r-plus").tool_parser == "command_r_plus"
    assert resolve_model("meetkai/functionary-small-v3.2").tool_parser == "functionary_v3_2"


# -- functionary_v3_1 ----------------------------------------------------------------------------------


def test_v31_one_call() -> None:
    """``<function=NAME>{json}</function>`` is one call; its arguments are the JSON source text."""
    m = any_mode('<function=get_weather>{"city": "Paris", "days": 3}</function>')
    assert calls(m) == [("get_weather", {"city": "Paris", "days": 3})]
    assert not m.content
    assert m.tool_calls[0].function.arguments == '{"city": "Paris", "days": 3}'


def test_v31_several_calls_text_around() -> None:
    """Calls one after another (with or without a newline) are parallel calls; text before and after stays content."""
    m = any_mode(
        'Let me check.\n<function=get_weather>{"city": "Paris"}</function>\n'
        '<function=ping>{}</function><function=get_weather>{"city": "Rome"}</function>\nDone.'
    )
    assert calls(m) == [("get_weather", {"city": "Paris"}), ("ping", {}), ("get_weather", {"city": "Rome"})]
    assert m.content == "Let me check.\n\nDone."


def test_v31_no_argument_call() -> None:
    """An empty body or ``{}`` give ``{}``; a header the output ends after is no call (its arguments never began)."""
    for text in ("<function=ping></function>", "<function=ping>{}</function>"):
        m = any_mode(text)
        assert calls(m) == [("ping", {})], text
        assert not m.content
    m = any_mode("<function=ping>")
    assert calls(m) == [] and m.content == "<function=ping>"


def test_v31_missing_closer_before_next_call() -> None:
    """A missing ``</function>`` is tolerated before the next ``<function=``."""
    m = any_mode('<function=get_weather>{"city": "Oslo"}<function=ping>{}')
    assert calls(m) == [("get_weather", {"city": "Oslo"}), ("ping", {})]


def test_v31_unknown_name_is_filtered() -> None:
    """A call to a tool the request did not offer is not emitted; its text is surfaced."""
    m = any_mode('<function=rm_rf>{"path": "/"}</function>ok')
    assert calls(m) == []
    assert m.content == '<function=rm_rf>{"path": "/"}</function>ok'


def test_v31_prose_after_header_is_text() -> None:
    """A header not followed by ``{`` or ``</function>`` is prose, surfaced whole."""
    m = any_mode("see <function=ping> for details")
    assert calls(m) == [] and m.content == "see <function=ping> for details"


def test_v31_malformed_final_payload() -> None:
    """A body cut short or broken closes the named call's arguments and surfaces the rest."""
    m = any_mode('<function=get_weather>{"city": "Par')
    assert calls(m) == [("get_weather", {"city": "Par"})]
    m = any_mode('<function=get_weather>{"city": ]}</function>')
    assert [n for n, _ in calls(m)] == ["get_weather"]
    assert m.content is not None and "]}</function>" in m.content


def test_v31_text_after_block() -> None:
    """Text right after ``</function>`` is content."""
    m = any_mode('<function=ping>{}</function> trailing')
    assert calls(m) == [("ping", {})] and m.content == " trailing"


def test_v31_python_tag_stays_text() -> None:
    """``<|python_tag|>`` raw code is not read as a call (documented): it stays content."""
    m = any_mode("<|python_tag|>print(1)")
    assert calls(m) == [] and m.content == "<|python_tag|>print(1)"


def test_v31_reasoning_and_tools_in_one_chunk() -> None:
    """Reasoning and a call in one chunk split into reasoning, then the call."""
    text = '<think>need weather</think>\n<function=get_weather>{"city": "Paris"}</function>'
    m = any_mode(text, reasoning_parser="deepseek_r1")
    assert m.reasoning_content == "need weather"
    assert calls(m) == [("get_weather", {"city": "Paris"})]
    one = accumulate(feed_chunks([text], tool_parser="functionary_v3_1", reasoning_parser="deepseek_r1", tools=TOOLS))
    assert message_key(one) == message_key(m)


def test_v31_required_constraint_renders_parseable_text() -> None:
    """``tool_choice="required"`` has a constraint whose trigger is the call opener."""
    prepared = prepare_request(TOOLS, "required", tool_parser="functionary_v3_1")
    assert prepared.constraint is not None
    assert prepared.constraint.triggers == ("<function=",)


# -- functionary_v3_2 -------------------------------------------------------------------------------------


def f32(text: str, **kw: Any) -> Any:
    """A Functionary v3.2 output on every chunking, both modes (the parser itself holds a partial ``>>>``)."""
    kw.setdefault("tools", TOOLS)
    check_chunkings(text, tool_parser="functionary_v3_2", chunking="tokens", **kw)
    return check_chunkings(text, tool_parser="functionary_v3_2", **kw)


def test_v32_declaration() -> None:
    """The block opens at the first non-blank text; ``>>>`` is the one marker; nothing is held by the feeder."""
    d = registry.get_tool_dialect("functionary_v3_2")
    assert d.openers == () and d.start_openers == ("",)
    assert d.markers == (">>>",) and d.token_prefixes == ()


def test_v32_all_is_content() -> None:
    """``all\\n`` addresses the content: the recipient line is dropped."""
    m = f32("all\nHello, world!\nWhat's up?")
    assert m.content == "Hello, world!\nWhat's up?" and calls(m) == []


def test_v32_call_then_more_messages() -> None:
    """``NAME\\n{json}`` is a call; ``>>>`` introduces the next message (content or another call)."""
    m = f32('get_weather\n{"city": "Paris"}>>>ping\n{}\n>>>all\nDone > ok >> fine')
    assert calls(m) == [("get_weather", {"city": "Paris"}), ("ping", {})]
    assert m.content == "Done > ok >> fine"


def test_v32_content_then_calls() -> None:
    """Content first, then calls, each after ``>>>``; an empty object is a no-argument call."""
    m = f32('all\nLet me check.>>>get_weather\n{"city": "Rome", "days": 2}>>>ping\n{}')
    assert m.content == "Let me check."
    assert calls(m) == [("get_weather", {"city": "Rome", "days": 2}), ("ping", {})]


def test_v32_first_line_not_a_recipient_is_content() -> None:
    """A first line that is no recipient (or a name not followed by an object) is content, kept whole."""
    for text in ("Hello there", "Sure!\nok", "python\nprint(1)", "ping\n", "all", "hello>>>all\nhi"):
        m = f32(text)
        assert calls(m) == [], text
        assert (m.content or "") == text.replace(">>>all\n", ""), text


def test_v32_long_first_line_is_content_without_waiting() -> None:
    """A first line longer than the longest offered name plus 16 is released before its newline."""
    from deltaflow import ResponseParser

    parser = ResponseParser("functionary_v3_2", None, TOOLS)
    got = "".join(d.content or "" for d in parser.feed("x" * 40))
    assert got == "x" * 40


def test_v32_unknown_name_is_filtered() -> None:
    """A call to a tool the request did not offer is surfaced as text; the next message still parses."""
    m = f32('nope\n{"a": 1}>>>ping\n{}')
    assert calls(m) == [("ping", {})]
    assert m.content == 'nope\n{"a": 1}'


def test_v32_malformed_final_payload() -> None:
    """A cut or broken object closes the call at its last safe point; the rest is content."""
    m = f32('get_weather\n{"city": "Par')
    assert calls(m) == [("get_weather", {"city": "Par"})]
    m = f32('get_weather\n{"city": ]}')
    assert calls(m) == [("get_weather", {})] and m.content == '"city": ]}'


def test_v32_text_after_call() -> None:
    """Text after a call's object (not ``>>>``) is content."""
    m = f32("ping\n{} trailing")
    assert calls(m) == [("ping", {})] and m.content == " trailing"


def test_v32_no_prefix_or_tools() -> None:
    """Without offered tools every name-like recipient followed by an object is a call."""
    m = f32('lookup\n{"q": "x"}', tools=None)
    assert calls(m) == [("lookup", {"q": "x"})]


def test_v32_reasoning_and_tools_in_one_chunk() -> None:
    """Reasoning before the output is its own block (the channel change ends it); the content's recipients still route."""
    text = "<think>plan it</think>all\nhi>>>ping\n{}"
    m = check_chunkings(text, tool_parser="functionary_v3_2", reasoning_parser="deepseek_r1", tools=TOOLS)
    assert (m.reasoning_content, m.content, calls(m)) == ("plan it", "hi", [("ping", {})])
    one = accumulate(feed_chunks([text], tool_parser="functionary_v3_2", reasoning_parser="deepseek_r1", tools=TOOLS))
    assert message_key(one) == message_key(m)


@pytest.mark.shared
def test_v32_separator_is_one_llama3_token(shared: Path) -> None:
    """llama3: ``>>>`` is one token, and the token-by-token stream equals parse_complete at every split."""
    tok = load_tokenizer("llama3")
    assert tok.token_to_id(">>>") is not None
    text = 'all\nChecking the weather.>>>get_weather\n{"city": "Paris", "days": 1}>>>ping\n{}'
    kwargs: dict[str, Any] = {"tool_parser": "functionary_v3_2", "tools": TOOLS}
    chunks = token_chunks(tok, text)
    assert ">>>" in chunks
    want = parse_complete(text, **kwargs)
    assert [n for n, _ in calls(want)] == ["get_weather", "ping"] and want.content == "Checking the weather."
    assert message_key(accumulate(feed_chunks(chunks, chunking="tokens", **kwargs))) == message_key(want)
    for cut in list(itertools.accumulate(len(c) for c in chunks))[:-1]:
        two = accumulate(feed_chunks(split_at(text, [cut]), chunking="tokens", **kwargs))
        assert message_key(two) == message_key(want), cut


# -- command_r_plus -------------------------------------------------------------------------------------


ACTION = 'Action:\n```json\n[{"tool_name": "get_weather", "parameters": {"city": "Paris"}}]\n```'


def test_crp_one_call() -> None:
    """``Action:`` and a ```json fence holding an array of ``{tool_name, parameters}`` is a call."""
    m = crp(ACTION)
    assert calls(m) == [("get_weather", {"city": "Paris"})] and not m.content


def test_crp_several_calls_and_text_around() -> None:
    """Each array element is a call; text before and after the block stays content."""
    m = crp(
        'I will look both up.\nAction: ```json\n[{"tool_name": "get_weather", "parameters": {"city": "Paris"}},\n'
        ' {"tool_name": "ping", "parameters": {}}]\n```\nDone.'
    )
    assert calls(m) == [("get_weather", {"city": "Paris"}), ("ping", {})]
    assert m.content == "I will look both up.\n\nDone."


def test_crp_no_argument_call() -> None:
    """An element without ``parameters`` is a call with ``{}``."""
    m = crp('Action:\n```json\n[{"tool_name": "ping"}]\n```')
    assert calls(m) == [("ping", {})]


def test_crp_unknown_name_is_filtered() -> None:
    """A call to a tool the request did not offer is not emitted."""
    m = crp('Action:\n```json\n[{"tool_name": "nope", "parameters": {}}, {"tool_name": "ping", "parameters": {}}]\n```')
    assert calls(m) == [("ping", {})]


def test_crp_malformed_final_payload() -> None:
    """An array cut short closes the named call and surfaces the rest; ``Action:`` prose stays prose."""
    m = crp('Action:\n```json\n[{"tool_name": "get_weather", "parameters": {"city": "Par')
    assert calls(m) == [("get_weather", {"city": "Par"})]
    m = crp("Action: none needed.")
    assert calls(m) == [] and m.content == "Action: none needed."


def test_crp_turn_tokens_are_framing() -> None:
    """Cohere's turn tokens frame the turn and are dropped outside calls; inside a call's arguments they are text."""
    m = crp("<|CHATBOT_TOKEN|>Hello<|END_OF_TURN_TOKEN|>")
    assert m.content == "Hello"
    m = crp('Sure.<|END_OF_TURN_TOKEN|>Action:\n```json\n[{"tool_name": "get_weather", "parameters": {"city": "<|CHATBOT_TOKEN|>"}}]\n```')
    assert (m.content, calls(m)) == ("Sure.", [("get_weather", {"city": "<|CHATBOT_TOKEN|>"})])


def test_crp_reasoning_and_tools_in_one_chunk() -> None:
    """Reasoning and an action block in one chunk split into reasoning, then the call."""
    text = "<think>plan</think>" + ACTION
    # "any" mode only: <think> is one token of the reasoning model, never split by a real tokenizer.
    m = check_chunkings(text, tool_parser="command_r_plus", reasoning_parser="deepseek_r1", tools=TOOLS)
    assert m.reasoning_content == "plan" and calls(m) == [("get_weather", {"city": "Paris"})]


def test_crp_required_constraint() -> None:
    """``tool_choice="required"`` has a constraint triggered by ``Action:``."""
    prepared = prepare_request(TOOLS, "required", tool_parser="command_r_plus")
    assert prepared.constraint is not None
    assert prepared.constraint.triggers == ("Action:",)


# -- real tokenizer (llama3: Functionary v3.1 is a Llama 3.1 fine-tune) ---------------------------------

CONTEXTS = ("", "x", "Hello.", "Sure!\n", "ok ", "a\n\n", "}", "</function>", "\n", " ")


def boundary_prefixes(tok: Any, marker: str, tails: tuple[str, ...]) -> set[str]:
    """The proper prefixes of ``marker`` that a token boundary leaves, over many surrounding texts."""
    found: set[str] = set()
    for before in CONTEXTS:
        for after in tails:
            enc = tok.encode(before + marker + after, add_special_tokens=False)
            start, end = len(before), len(before) + len(marker)
            found.update(marker[: b - start] for _, b in enc.offsets if start < b < end)
    return found


@pytest.mark.shared
def test_v31_token_prefixes(shared: Path) -> None:
    """llama3: ``<function=`` splits into ``<`` ``function`` ``=NAME``; the declared prefixes are exactly those."""
    tok = load_tokenizer("llama3")
    dialect = registry.get_tool_dialect("functionary_v3_1")
    found = boundary_prefixes(tok, "<function=", ("get_weather>{", "ping>{}", "x>", "_a>", "Read>", "1>", "\n"))
    assert found == set(dialect.token_prefixes)


def token_chunks(tok: Any, text: str) -> list[str]:
    """Decode ``text``'s tokens one at a time as an engine would (special tokens kept)."""
    from tokenizers.decoders import DecodeStream

    ds = DecodeStream(skip_special_tokens=False)
    chunks = [ds.step(tok, i) for i in tok.encode(text, add_special_tokens=False).ids]
    out = [c for c in chunks if c]
    assert "".join(out) == text
    return out


@pytest.mark.shared
def test_v31_token_by_token_stream(shared: Path) -> None:
    """A realistic output decoded token by token with chunking="tokens" equals parse_complete, at every split."""
    tok = load_tokenizer("llama3")
    text = (
        'I\'ll check both.<function=get_weather>{"city": "São Paulo", "days": 2}</function>\n'
        "<function=ping>{}</function>"
    )
    kwargs: dict[str, Any] = {"tool_parser": "functionary_v3_1", "tools": TOOLS}
    chunks = token_chunks(tok, text)
    want = parse_complete(text, **kwargs)
    assert [n for n, _ in calls(want)] == ["get_weather", "ping"]
    assert message_key(accumulate(feed_chunks(chunks, chunking="tokens", **kwargs))) == message_key(want)
    for cut in list(itertools.accumulate(len(c) for c in chunks))[:-1]:
        two = accumulate(feed_chunks(split_at(text, [cut]), chunking="tokens", **kwargs))
        assert message_key(two) == message_key(want), cut


def test_v32_content_is_text_not_a_malformed_block() -> None:
    """Functionary v3.2 content reaches the identity stage as text: no malformed-block diagnostic is recorded."""
    from deltaflow.pipeline.chain import SyncChain
    from deltaflow.pipeline.sync import default_stage_factories
    from deltaflow.stages.identity import IdentityFirstBuffer

    stages = [f() for _, f in default_stage_factories(tool_parser="functionary_v3_2")]
    identity = next(st for st in stages if isinstance(st, IdentityFirstBuffer))
    identity.diagnostics = []
    chain = SyncChain(stages)
    out = chain.run(["all\nHello", ", world!\n>>>all\nmore"]) + chain.finish()
    assert "".join(d.content or "" for d in out if getattr(d, "content", None)) == "Hello, world!\nmore"
    assert identity.diagnostics == []
