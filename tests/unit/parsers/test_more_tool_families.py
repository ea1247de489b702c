"""More tool families: ``lfm2``, ``olmo3``, ``step3``, ``step3p5``, ``ling3``, ``deepseek_v4``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow._core.pyliteral import lenient_literal_to_json as python_literal_to_json
from deltaflow.parsers import registry
from deltaflow.testing import check_chunkings, feed_chunks, load_tokenizer, message_key

S = "<|tool_call_start|>"
E = "<|tool_call_end|>"
STEP = ("<｜tool_calls_begin｜>", "<｜tool_call_begin｜>", "function<｜tool_sep｜>", "<｜tool_call_end｜>", "<｜tool_calls_end｜>")


def tool(name: str, **props: str) -> dict[str, Any]:
    """An OpenAI tool definition with typed properties."""
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}}},
    }


TOOLS = [tool("get_weather", city="string", days="integer"), tool("search", query="string"), tool("ping")]


def calls(m: Any) -> list[tuple[str, Any]]:
    """The message's calls as (name, decoded arguments)."""
    out = []
    for c in m.tool_calls:
        args = json.loads(c.function.arguments)
        assert isinstance(args, dict)
        out.append((c.function.name, args))
    return out


def step3_call(name: str, body: str, sep: str = STEP[2]) -> str:
    """One Step3 call with its per-call wrapper."""
    return f'{STEP[1]}{sep}<steptml:invoke name="{name}">{body}</steptml:invoke>{STEP[3]}'


# Well-formed outputs of every dialect: (dialect, text, calls, content).
CASES: list[tuple[str, str, list[tuple[str, Any]], str | None]] = [
    ("lfm2", f"{S}[get_weather(city='Paris', days=3)]{E}", [("get_weather", {"city": "Paris", "days": 3})], None),
    ("lfm2", f"Checking.{S}[get_weather(city=\"LA\"), search(query='x'), ping()]{E}\nDone.",
     [("get_weather", {"city": "LA"}), ("search", {"query": "x"}), ("ping", {})], "Checking.\nDone."),
    ("lfm2", f'{S}[{{"name": "search", "arguments": {{"query": "a"}}}}, {{"name": "ping", "parameters": {{}}}}]{E}',
     [("search", {"query": "a"}), ("ping", {})], None),
    ("lfm2", f'{S} {{"name": "search", "arguments": {{"query": "a"}}}} {E} after',
     [("search", {"query": "a"})], " after"),
    ("lfm2", f"{S}[ping()]{E} mid {S}[search(query='b')]{E}", [("ping", {}), ("search", {"query": "b"})], " mid"),
    ("lfm2", f"{S}[search(query='sed -n '1,9p' f.py', n=07, tags={{'b', 'a'}}, ok=true)]{E}",
     [("search", {"query": "sed -n '1,9p' f.py", "n": 7, "tags": ["b", "a"], "ok": True})], None),
    ("olmo3", "<function_calls>get_weather(city='Paris')\nping()\nsearch(query=null)</function_calls>",
     [("get_weather", {"city": "Paris"}), ("ping", {}), ("search", {"query": None})], None),
    ("olmo3", "Let me look.<function_calls>ping()</function_calls> ok", [("ping", {})], "Let me look. ok"),
    ("step3", STEP[0] + step3_call("get_weather", '<steptml:parameter name="city">Tokyo</steptml:parameter>'
                                   '<steptml:parameter name="days">2</steptml:parameter>')
     + step3_call("ping", "", sep="") + STEP[4] + " after",
     [("get_weather", {"city": "Tokyo", "days": 2}), ("ping", {})], " after"),
    ("step3p5", "Sure.<tool_call>\n<function=get_weather>\n<parameter=city>\nDallas\n</parameter>\n"
                "<parameter=days>\n4\n</parameter>\n</function>\n</tool_call>",
     [("get_weather", {"city": "Dallas", "days": 4})], "Sure."),
    ("ling3", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>123 Main St</arg_value>\n</tool_call>"
              "<tool_call>ping\n</tool_call>",
     [("get_weather", {"city": "123 Main St"}), ("ping", {})], None),
    ("deepseek_v4", 'Go.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                    '<｜DSML｜parameter name="city" string="true">Tokyo</｜DSML｜parameter>\n'
                    '<｜DSML｜parameter name="days" string="false">1</｜DSML｜parameter>\n'
                    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
     [("get_weather", {"city": "Tokyo", "days": 1})], "Go.\n\n"),
]


@pytest.mark.parametrize(("dialect", "text", "want", "content"), CASES)
def test_well_formed_outputs(dialect: str, text: str, want: list[tuple[str, Any]], content: str | None) -> None:
    """Several calls, no-argument calls and the text around them, on every chunking."""
    m = check_chunkings(text, tool_parser=dialect, tools=TOOLS)
    assert calls(m) == want
    assert (m.content or None) == content


@pytest.mark.parametrize(
    ("dialect", "text"),
    [
        ("lfm2", f"{S}[rm_rf(path='/'), ping()]{E}"),
        ("olmo3", "<function_calls>rm_rf(path='/')\nping()</function_calls>"),
        ("step3", STEP[0] + step3_call("rm_rf", '<steptml:parameter name="p">/</steptml:parameter>')
         + step3_call("ping", "") + STEP[4]),
        ("step3p5", "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call><tool_call>\n<function=ping>\n</function>\n</tool_call>"),
        ("ling3", "<tool_call>rm_rf\n</tool_call><tool_call>ping\n</tool_call>"),
        ("deepseek_v4", '<｜DSML｜tool_calls><｜DSML｜invoke name="rm_rf"></｜DSML｜invoke>'
                        '<｜DSML｜invoke name="ping"></｜DSML｜invoke></｜DSML｜tool_calls>'),
    ],
)
def test_unknown_name_is_filtered_when_tools_are_given(dialect: str, text: str) -> None:
    """A call to a tool not offered is never emitted and its text is surfaced; the offered call goes on."""
    m = check_chunkings(text, tool_parser=dialect, tools=TOOLS)
    assert calls(m) == [("ping", {})]
    assert "rm_rf" in (m.content or "")


@pytest.mark.parametrize(
    ("dialect", "text", "want", "surfaced"),
    [
        ("lfm2", f"{S}[search(query='x', n=foo)]{E}", [("search", {"query": "x"})], ", n=foo)]"),
        ("lfm2", f"{S}{E}", [], S),
        ("lfm2", f"{S}[1, 2]{E}", [], "[1, 2]"),
        ("lfm2", f'{S}[{{"name": "search", "arguments": {{"query": "x"}}}}, 42]{E}', [("search", {"query": "x"})], "42"),
        ("olmo3", "<function_calls>search(query='x') junk</function_calls>", [("search", {"query": "x"})], "junk"),
        ("step3", STEP[0] + STEP[1] + '<steptml:invoke name="search"><steptml:parameter name="query">cut',
         [("search", {"query": "cut"})], None),
        ("deepseek_v4", '<｜DSML｜tool_calls><｜DSML｜invoke name="search"><｜DSML｜parameter name="query" string="true">x',
         [("search", {"query": "x"})], None),
    ],
)
def test_malformed_or_cut_payload_on_the_final_chunk(
    dialect: str, text: str, want: list[tuple[str, Any]], surfaced: str | None
) -> None:
    """A named call is completed with what it has; text it cannot use is surfaced, never lost."""
    m = check_chunkings(text, tool_parser=dialect, tools=TOOLS)
    assert calls(m) == want
    if surfaced is not None:
        assert surfaced in (m.content or "")
    p = ResponseParser(dialect, tools=TOOLS)
    deltas = p.feed(text[: len(text) // 2]) + p.feed(text[len(text) // 2 :], final=True)
    assert message_key(accumulate(deltas)) == message_key(m)


def test_bracketed_prose_outside_the_markers_is_content() -> None:
    """LFM2 opens blocks only at its marker: a bracket in prose stays prose (llama.cpp)."""
    text = "Use [link text](url), or [f(a=1)]."
    m = check_chunkings(text, tool_parser="lfm2")
    assert m.tool_calls == [] and m.content == text


def test_reasoning_and_tools_in_one_chunk() -> None:
    """Reasoning then a block in one chunk: reasoning, then the call."""
    text = f"<think>Use it.</think>{S}[ping()]{E}"
    m = check_chunkings(text, tool_parser="lfm2", reasoning_parser="qwen3")
    assert m.reasoning_content == "Use it." and calls(m) == [("ping", {})]
    assert message_key(accumulate(feed_chunks([text], tool_parser="lfm2", reasoning_parser="qwen3"))) == message_key(m)


def test_nested_quote_is_held_until_what_follows_decides() -> None:
    """A quote followed by blanks at a chunk end is held; the next character decides whether it closes."""
    chunks = [S + "[search(query='a'", "   ", "b')]" + E]
    m = accumulate(feed_chunks(chunks, tool_parser="lfm2"))
    assert calls(m) == [("search", {"query": "a'   b"})]
    assert message_key(m) == message_key(parse_complete("".join(chunks), tool_parser="lfm2"))


@pytest.mark.parametrize(
    ("source", "want"),
    [
        ("07", "7"),
        ("{'b', 'a'}", '["b", "a"]'),
        ("{'k': null, 1: True}", '{"k": null, "1": true}'),
        ("'a\nb'", '"a\\nb"'),
        ("'a\\,b'", '"a\\\\,b"'),
        ("-2.5", "-2.5"),
        ("f()", None),
        ("b'x'", None),
        ("1e999", None),
        ("{**x}", None),
    ],
)
def test_lenient_literal_conversion(source: str, want: str | None) -> None:
    """Literals only, never evaluated; LFM2's recoveries applied."""
    assert python_literal_to_json(source) == want


def test_olmo3_opener_prefixes_match_the_cl100k_tokenizer(shared: Path) -> None:
    """Every proper prefix of <function_calls> a cl100k token boundary can leave is declared (OLMo's base vocab)."""
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(shared / "tokenizers" / "cl100k" / "cl100k_base.tiktoken"))
    pat = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$"""
           r"""|\s*[\r\n]|\s+(?!\S)|\s""")
    enc = tiktoken.Encoding("cl100k_probe", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
    opener = "<function_calls>"
    declared = set(registry.get_tool_dialect("olmo3").token_prefixes)
    seen: set[str] = set()
    for context in ("", "Sure.\n", "x ", "a.", "\n\n"):
        text = context + opener + "ping()"
        ids = enc.encode(text)
        pos = 0
        for i in ids:
            pos += len(enc.decode([i]))
            cut = text[len(context) : pos] if pos > len(context) else ""
            if cut and opener.startswith(cut) and cut != opener:
                seen.add(cut)
    assert seen and seen <= declared


def test_deepseek_v4_opener_prefixes_match_the_deepseek_tokenizer(shared: Path) -> None:
    """Every proper prefix of <｜DSML｜tool_calls> a DeepSeek-V3.1 token boundary leaves is declared."""
    tok = load_tokenizer("deepseek-v3.1")
    if tok is None:
        pytest.skip("shared/tokenizers/deepseek-v3.1 is not available")
    opener = "<｜DSML｜tool_calls>"
    declared = set(registry.get_tool_dialect("deepseek_v4").token_prefixes)
    seen: set[str] = set()
    for context in ("", "Go.\n\n", "x ", "</think>"):
        text = context + opener + '\n<｜DSML｜invoke name="f">'
        enc = tok.encode(text, add_special_tokens=False)
        for _, end in enc.offsets:
            cut = text[len(context) : end] if end > len(context) else ""
            if cut and opener.startswith(cut) and cut != opener:
                seen.add(cut)
    assert seen and seen <= declared


def test_deepseek_v4_streams_token_by_token(shared: Path) -> None:
    """A realistic DeepSeek-V4 output, decoded token by token, gives parse_complete's message."""
    tok = load_tokenizer("deepseek-v3.1")
    if tok is None:
        pytest.skip("shared/tokenizers/deepseek-v3.1 is not available")
    from tokenizers.decoders import DecodeStream

    text = CASES[-1][1]
    ids = tok.encode(text, add_special_tokens=False).ids
    stream = DecodeStream(skip_special_tokens=False)
    chunks = [stream.step(tok, i) or "" for i in ids]
    assert "".join(chunks) == text
    kw: dict[str, Any] = {"tool_parser": "deepseek_v4", "tools": TOOLS}
    p = ResponseParser(chunking="tokens", **kw)
    deltas = [d for c in chunks for d in p.feed(c)] + p.feed("", final=True)
    assert message_key(accumulate(deltas)) == message_key(parse_complete(text, **kw))


def test_lfm2_and_step3_markers_are_single_tokens_so_no_prefix_is_declared() -> None:
    """LFM2's and Step3's openers are special tokens (vLLM looks their ids up): nothing is held in tokens mode."""
    assert registry.get_tool_dialect("lfm2").token_prefixes == ()
    assert registry.get_tool_dialect("step3").token_prefixes == ()
    p = ResponseParser("lfm2", chunking="tokens")
    deltas = p.feed("<|tool_call") + p.feed("_start|>[ping()]<|tool_call_end|>", final=True)
    assert "".join(d.content or "" for d in deltas).startswith("<|tool_call")


def test_ling3_end_of_turn_token_is_framing() -> None:
    """Ling 3's ``<|role_end|>`` is turn framing: dropped outside calls (llama.cpp strips it), text inside a value."""
    m = check_chunkings("Here is the answer.<|role_end|>", tool_parser="ling3", reasoning_parser="ling3", enable_thinking=False)
    assert (m.content, m.reasoning_content) == ("Here is the answer.", None)
    block = "<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>a<|role_end|>b</arg_value>\n</tool_call>"
    m = check_chunkings("</think>" + block + "<|role_end|>", tool_parser="ling3", reasoning_parser="ling3")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_time", '{"city": "a<|role_end|>b"}')]
    assert m.content is None
