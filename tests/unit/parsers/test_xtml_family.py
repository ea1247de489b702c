"""Protocols from llama.cpp (dialects/kimi.py): Kimi K3 XTML tool and reasoning parsers."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from deltaflow import accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.parsers.dialects.kimi import xtml_prefixes
from deltaflow.testing import check_chunkings, feed_chunks, message_key

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
THINK_END = CLOSE + "think" + SEP
RESP = (OPEN + "response" + SEP, CLOSE + "response" + SEP)
TOOLS = (OPEN + "tools" + SEP, CLOSE + "tools" + SEP)
MSG_END = CLOSE + "message" + SEP


def k3_tools(*names: str) -> list[dict[str, Any]]:
    """Tool definitions with an integer, a string and an object parameter."""
    props = {"n": {"type": "integer"}, "q": {"type": "string"}, "o": {"type": "object"}}
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": props}}}
            for n in names]


def k3_arg(key: str, value: str, typ: str | None = "string") -> str:
    """One K3 argument element."""
    attr = f' type="{typ}"' if typ is not None else ""
    return f'{OPEN}argument key="{key}"{attr}{SEP}{value}{CLOSE}argument{SEP}'


def k3_call(name: str, *args: str, index: int = 1) -> str:
    """One K3 call element."""
    return f'{OPEN}call tool="{name}" index="{index}"{SEP}{"".join(args)}{CLOSE}call{SEP}'


def k3(text: str, **kwargs: Any) -> Any:
    """Parse with the kimi_k3 tool and reasoning parsers, checking every chunking."""
    kwargs.setdefault("reasoning_parser", "kimi_k3")
    return check_chunkings(text, tool_parser="kimi_k3", **kwargs)


def calls(msg: Any) -> list[tuple[str, Any]]:
    """(name, decoded arguments) of every call."""
    return [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls]


def test_reasoning_response_and_typed_arguments() -> None:
    """Reasoning ends at the think closer, the response wrapper is dropped and values are typed by their attribute."""
    body = k3_call("f", k3_arg("n", "1", "number"), k3_arg("q", 'say "hi"\n'), k3_arg("b", "true", "boolean"),
                   k3_arg("z", "null", "null"), k3_arg("o", '{"a": [1]}', "object"), k3_arg("l", "[1, 2]", "array"))
    text = f"think{THINK_END}{RESP[0]}On it.{RESP[1]}{TOOLS[0]}{body}{TOOLS[1]}{MSG_END}"
    msg = k3(text, tools=k3_tools("f"))
    assert msg.reasoning_content == "think"
    assert msg.content == "On it."
    assert calls(msg) == [("f", {"n": 1, "q": 'say "hi"\n', "b": True, "z": None, "o": {"a": [1]}, "l": [1, 2]})]


def test_several_calls_json_body_and_no_arguments() -> None:
    """Several calls in one section: arguments, a json body, and a call without arguments."""
    body = (k3_call("f", k3_arg("q", "x")) + "\n" + k3_call("g", f'{OPEN}json type="object"{SEP}{{"k": true}}{CLOSE}json{SEP}', index=2)
            + k3_call("h", index=3))
    msg = k3(f"r{THINK_END}{TOOLS[0]}{body}{TOOLS[1]}", tools=k3_tools("f", "g", "h"))
    assert calls(msg) == [("f", {"q": "x"}), ("g", {"k": True}), ("h", {})]
    assert not msg.content


def test_untyped_value_uses_the_schema() -> None:
    """A value without a type attribute is converted with the tool's schema (else it is a string)."""
    body = k3_call("f", k3_arg("n", "7", None), k3_arg("other", "7", None))
    msg = k3(f"r{THINK_END}{TOOLS[0]}{body}{TOOLS[1]}", tools=k3_tools("f"))
    assert calls(msg) == [("f", {"n": 7, "other": "7"})]


def test_a_value_that_is_not_its_type_is_kept_as_a_string() -> None:
    """A number-typed value that is not a number is streamed as the string the model wrote."""
    msg = k3(f"r{THINK_END}{TOOLS[0]}{k3_call('f', k3_arg('n', 'many', 'number'))}{TOOLS[1]}", tools=k3_tools("f"))
    assert calls(msg) == [("f", {"n": "many"})]


def test_attribute_entities_are_decoded() -> None:
    """The template's escaped attribute values (&quot; and &amp;) are decoded in names and keys."""
    msg = k3(f"r{THINK_END}{TOOLS[0]}{k3_call('f', k3_arg('a&amp;&quot;b', 'v'))}{TOOLS[1]}")
    assert calls(msg) == [("f", {'a&"b': "v"})]


def test_unknown_name_is_filtered_and_surfaced() -> None:
    """A call to a tool the request did not offer is not emitted; its text is surfaced."""
    call = k3_call("rm_rf", k3_arg("q", "x"))
    msg = k3(f"r{THINK_END}{TOOLS[0]}{call}{TOOLS[1]}", tools=k3_tools("f"))
    assert msg.tool_calls == []
    assert call in (msg.content or "")


@pytest.mark.parametrize("header", ['call tool="' + "v" * 600 + '" index="1"', 'call index="1"'])
def test_a_call_tag_that_is_no_call_is_surfaced_and_the_section_goes_on(header: str) -> None:
    """A call tag with a header too long or no tool name is text up to its closer; the calls around it are kept."""
    bad = f"{OPEN}{header}{SEP}{k3_arg('q', 'x')}{CLOSE}call{SEP}"
    good = k3_call("f", k3_arg("q", "y"), index=2)
    msg = k3(f"r{THINK_END}{TOOLS[0]}{k3_call('f', k3_arg('q', 'x'))}{bad}{good}{TOOLS[1]}!", tools=k3_tools("f"))
    assert calls(msg) == [("f", {"q": "x"}), ("f", {"q": "y"})]
    assert msg.content == bad + "!"
    only_bad = k3(f"r{THINK_END}{TOOLS[0]}{bad}{TOOLS[1]}!", tools=k3_tools("f"))
    assert only_bad.tool_calls == []
    assert only_bad.content == f"{TOOLS[0]}{bad}{TOOLS[1]}!"


def test_truncated_string_value_is_closed() -> None:
    """Output ending inside a string value closes the value and the arguments."""
    msg = k3(f"r{THINK_END}{TOOLS[0]}{OPEN}call tool=\"f\"{SEP}{OPEN}argument key=\"q\" type=\"string\"{SEP}abc")
    assert calls(msg) == [("f", {"q": "abc"})]


def test_truncated_typed_value_is_surfaced() -> None:
    """An object value cut short by the end of the output is not invented: no argument began, so no call; all text."""
    arg = f'{OPEN}argument key="o" type="object"{SEP}{{"a": '
    msg = k3(f"r{THINK_END}{TOOLS[0]}{OPEN}call tool=\"f\"{SEP}{arg}", tools=k3_tools("f"))
    assert calls(msg) == []
    assert (msg.content or "").endswith(f'{OPEN}call tool="f"{SEP}{arg}')


def test_malformed_json_body_is_no_call_and_surfaced() -> None:
    """A json body that is not an object ends the block; the arguments never began, so no call: all is content."""
    text = f'r{THINK_END}{TOOLS[0]}{OPEN}call tool="f"{SEP}{OPEN}json{SEP}[1]{CLOSE}json{SEP}{CLOSE}call{SEP}{TOOLS[1]}'
    msg = k3(text)
    assert calls(msg) == []
    assert (msg.content or "").startswith(f'{TOOLS[0]}{OPEN}call tool="f"{SEP}{OPEN}json{SEP}[1]')


def test_section_without_calls_is_surfaced() -> None:
    """A tools section holding no call is surfaced whole, and the text after it too."""
    msg = k3(f"r{THINK_END}{TOOLS[0]}noise{TOOLS[1]}after")
    assert msg.tool_calls == []
    assert msg.content == f"{TOOLS[0]}noise{TOOLS[1]}after"


def test_text_after_the_block_is_content() -> None:
    """Text after the tools section stays content (the end-of-message token too: the engine's stop token)."""
    msg = k3(f"r{THINK_END}{TOOLS[0]}{k3_call('f')}{TOOLS[1]} tail{MSG_END}<|end_of_msg|>")
    assert msg.content == " tail<|end_of_msg|>"
    assert calls(msg) == [("f", {})]


def test_without_reasoning_parser_the_framing_is_still_dropped() -> None:
    """Without a reasoning parser the tool parser drops the response and message markers."""
    msg = k3(f"{RESP[0]}Hello{RESP[1]}{MSG_END}", reasoning_parser=None)
    assert msg.content == "Hello"


def test_thinking_off_output_starts_in_the_response() -> None:
    """With thinking off the prompt opens the response: the output is content up to its closer."""
    msg = k3(f"Hello{RESP[1]}{MSG_END}", enable_thinking=False)
    assert msg.content == "Hello"
    assert not msg.reasoning_content


def test_missing_think_closer_ends_reasoning_at_the_response() -> None:
    """The response or tools section ends reasoning when the think closer is missing."""
    msg = k3(f"r{RESP[0]}a{RESP[1]}{TOOLS[0]}{k3_call('f')}{TOOLS[1]}")
    assert msg.reasoning_content == "r"
    assert msg.content == "a"
    assert calls(msg) == [("f", {})]


def test_reasoning_and_tools_in_one_chunk() -> None:
    """Reasoning, content and a call all in a single chunk parse the same as streamed."""
    text = f"why{THINK_END}{RESP[0]}ok{RESP[1]}{TOOLS[0]}{k3_call('f', k3_arg('n', '2', 'number'))}{TOOLS[1]}"
    msg = parse_complete(text, tool_parser="kimi_k3", reasoning_parser="kimi_k3")
    assert (msg.reasoning_content, msg.content, calls(msg)) == ("why", "ok", [("f", {"n": 2})])


@pytest.mark.parametrize("cut", range(1, 40))
def test_every_token_boundary_split(cut: int) -> None:
    """Any split of a call keeps stream == complete (every chunking is checked)."""
    text = f"r{THINK_END}{TOOLS[0]}{k3_call('f', k3_arg('q', 'v'))}{TOOLS[1]}"
    msg = k3(text[:cut] + text[cut:])
    assert calls(msg) == [("f", {"q": "v"})]


def test_declared_token_prefixes() -> None:
    """The declared prefixes are the lead token plus any part of the tag word (the three tokens are atomic)."""
    assert xtml_prefixes(TOOLS[0]) == tuple(OPEN + "tools"[:k] for k in range(6))
    dialect = registry.get_tool_dialect("kimi_k3")
    for p in dialect.token_prefixes:
        assert any(o.startswith(p) and len(p) < len(o) for o in dialect.openers)
        assert p.startswith((OPEN, CLOSE)) and SEP not in p
    spec = registry.get_reasoning_dialect("kimi_k3")
    assert spec.starts_open and spec.content_wrap == RESP


def test_tokens_mode_with_atomic_tokens() -> None:
    """Chunks cut at every token boundary the K3 tokenizer allows (never inside a special token) parse the same."""
    text = f"r{THINK_END}{RESP[0]}ok{RESP[1]}{TOOLS[0]}{k3_call('f', k3_arg('q', 'v'))}{TOOLS[1]}{MSG_END}"
    pieces = re.split(r"(<\|(?:open|close|sep)\|>)", text)
    chunks = [c for p in pieces for c in ([p] if p.startswith("<|") else list(p))]
    kwargs: dict[str, Any] = {"tool_parser": "kimi_k3", "reasoning_parser": "kimi_k3"}
    want = parse_complete(text, **kwargs)
    got = accumulate(feed_chunks(chunks, chunking="tokens", **kwargs))
    assert message_key(got) == message_key(want)
    assert calls(want) == [("f", {"q": "v"})]
