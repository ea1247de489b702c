"""More reasoning protocols: step3p5, olmo3, nemotron_v3, holo2, hy_v3 (<think>), granite (prose markers), gemma4,
hunyuan_a13b, ernie45, command_r7b and granite_thinking_parser (labels, content wrappers, newline stripping)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deltaflow import ResponseParser, accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.parsers.dialects.granite import GRANITE_END, GRANITE_START
from deltaflow.parsers.spec import all_prefixes
from deltaflow.testing import check_chunkings, feed_chunks, load_tokenizer, message_key, split_at

THINK_OPEN = ("step3p5", "olmo3", "nemotron_v3", "holo2")


@pytest.mark.parametrize("name", THINK_OPEN)
@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        ("plan</think>answer", "plan", "answer"),
        ("<think>plan</think>answer", "plan", "answer"),
        ("\n<think>a\nb\n</think>\n\nanswer", "\na\nb\n", "\n\nanswer"),  # kept verbatim
        ("still thinking", "still thinking", None),
        ("</think>answer", None, "answer"),
        ("a</think>b</think>c", "a", "b</think>c"),
    ],
)
def test_think_protocols_start_open(name: str, text: str, reasoning: str | None, content: str | None) -> None:
    """The output starts inside reasoning; the first </think> ends it; every chunking agrees."""
    m = check_chunkings(text, reasoning_parser=name)
    if name == "step3p5" and reasoning is not None:
        reasoning = reasoning.rstrip("\n") if "</think>" in text else reasoning  # its newlines before </think> drop
    assert (m.reasoning_content or None, m.content or None) == (reasoning, content)


@pytest.mark.parametrize("name", (*THINK_OPEN, "hy_v3"))
def test_thinking_disabled_is_all_content(name: str) -> None:
    """enable_thinking=False makes the whole output content, markers included."""
    m = check_chunkings("a</think>b", reasoning_parser=name, enable_thinking=False)
    assert (m.reasoning_content, m.content) == (None, "a</think>b")


def test_hy_v3_thinks_only_when_asked() -> None:
    """HY-V3 splits reasoning only with enable_thinking=True (vLLM's default is no_think)."""
    assert parse_complete("plain answer", reasoning_parser="hy_v3").content == "plain answer"
    m = check_chunkings("plan</think>answer", reasoning_parser="hy_v3", enable_thinking=True)
    assert (m.reasoning_content, m.content) == ("plan", "answer")


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        (f"{GRANITE_START}This\nThat{GRANITE_END}The rest", "This\nThat", "The rest"),
        (f"  {GRANITE_START}plan{GRANITE_END}", "plan", "  "),  # leading blanks stay content
        (f"{GRANITE_START}cut off", "cut off", None),
        ("Plain answer. Here is my response: ok", None, "Plain answer. Here is my response: ok"),
        (f"Hi {GRANITE_START}x", None, f"Hi {GRANITE_START}x"),
    ],
)
def test_granite_prose_markers(text: str, reasoning: str | None, content: str | None) -> None:
    """Granite reasons only when the output opens with its thought-process sentence."""
    m = check_chunkings(text, reasoning_parser="granite")
    assert (m.reasoning_content or None, m.content or None) == (reasoning, content)


def test_granite_holds_every_marker_prefix_in_tokens_mode() -> None:
    """Prose markers may be cut after any word: token mode holds every proper prefix, at every split point."""
    spec = registry.get_reasoning_dialect("granite")
    assert set(spec.token_prefixes) == set(all_prefixes(GRANITE_START, GRANITE_END))
    text = f"{GRANITE_START}I think.{GRANITE_END}Answer."
    want = message_key(parse_complete(text, reasoning_parser="granite"))
    for cut in range(1, len(text)):
        got = accumulate(feed_chunks(split_at(text, [cut]), reasoning_parser="granite", chunking="tokens"))
        assert message_key(got) == want, cut


def test_reasoning_and_tools_in_one_chunk() -> None:
    """Reasoning, content and a hermes call in one chunk are split and parsed."""
    text = 'plan</think>ok<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    m = check_chunkings(text, reasoning_parser="step3p5", tool_parser="hermes")
    assert (m.reasoning_content, m.content) == ("plan", "ok")
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": 1}')]


@pytest.mark.shared
@pytest.mark.parametrize("context", ["", "Hello", "a\n", " ", "x.", "天气", "<think>", "\n\n"])
def test_holo2_markers_are_single_qwen3_tokens(shared: Path, context: str) -> None:
    """Holo2 (Qwen3 vocabulary) encodes <think> and </think> as one token each in context: no prefixes to declare."""
    tok = load_tokenizer("qwen3")
    if tok is None:
        pytest.skip("shared/tokenizers/qwen3 is absent")
    assert registry.get_reasoning_dialect("holo2").token_prefixes == ()
    for marker in ("<think>", "</think>"):
        for after in ("", "\n", "The", " x"):
            ids = tok.encode(context + marker + after, add_special_tokens=False).ids
            assert tok.token_to_id(marker) in ids, (context, marker, after)


@pytest.mark.shared
def test_holo2_output_streamed_token_by_token(shared: Path) -> None:
    """A realistic Holo2 output decoded token by token through chunking="tokens" gives the complete parse."""
    tok = load_tokenizer("qwen3")
    if tok is None:
        pytest.skip("shared/tokenizers/qwen3 is absent")
    from tokenizers.decoders import DecodeStream

    text = "The user wants the weather.\nI should call the tool.\n</think>\n\nIt is sunny in Paris 😀."
    ds = DecodeStream(skip_special_tokens=False)
    pieces = [p for i in tok.encode(text, add_special_tokens=False).ids if (p := ds.step(tok, i))]
    assert "".join(pieces) == text
    p = ResponseParser(reasoning_parser="holo2", chunking="tokens")
    deltas = [d for piece in pieces for d in p.feed(piece)] + p.feed("", final=True)
    assert message_key(accumulate(deltas)) == message_key(parse_complete(text, reasoning_parser="holo2"))


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        ("<|channel>thought\nplan<channel|>answer", "plan", "answer"),
        ("<|channel>thought<channel|>answer", None, "answer"),
        ("<|channel>thoughtful<channel|>a", "ful", "a"),
        ("<|channel>plan", "plan", None),
        ("answer only", None, "answer only"),
        ("Before\n<|channel>plan<channel|>\nrest", "plan", "Before\n\nrest"),
        ("<|channel><|channel>thought\n<channel|>hi", None, "hi"),
        ("<|channel>thought\n<channel|>hi<channel|>", None, "hi"),
        ("hi<|channel>thought\n<channel|>", None, "hi"),
        ("r<channel|>c", None, "rc"),
    ],
)
def test_gemma4_channel(text: str, reasoning: str | None, content: str | None) -> None:
    """Gemma 4: the thought label is dropped, channels may reopen, stray channel markers are dropped."""
    m = check_chunkings(text, reasoning_parser="gemma4")
    assert (m.reasoning_content or None, m.content or None) == (reasoning, content)


def test_gemma4_reasoning_and_tool_call_in_one_chunk() -> None:
    """A Gemma 4 thought and a call in one chunk: reasoning split, call parsed, nothing else left."""
    text = '<|channel>thought\nI need the time.<channel|><|tool_call>call:get_time{city:<|"|>Paris<|"|>}<tool_call|>'
    m = check_chunkings(text, reasoning_parser="gemma4", tool_parser="gemma4")
    assert (m.reasoning_content, m.content) == ("I need the time.", None)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_time", '{"city": "Paris"}')]


def test_gemma4_thinking_disabled_keeps_markers() -> None:
    """With enable_thinking=False Gemma 4's channel markers are content text."""
    m = check_chunkings("a<|channel>b<channel|>", reasoning_parser="gemma4", enable_thinking=False)
    assert (m.reasoning_content, m.content) == (None, "a<|channel>b<channel|>")


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        ("<think>\nplan\n</think>\n<answer>\nthe rest\n</answer>", "plan", "the rest"),
        ("<think>\n\n</think>\n<answer>\nquick\n</answer>", None, "quick"),
        ("<think>plan\n</think><answer>\nx", "plan", "x"),
        ("<think>\nplan\n</think>\nno wrapper", "plan", "\nno wrapper"),
        ("just content", None, "just content"),
        ("<answer>\nwrapped\n</answer>", None, "wrapped"),
        ("<think>\ncut off", "cut off", None),
    ],
)
def test_hunyuan_a13b(text: str, reasoning: str | None, content: str | None) -> None:
    """Hunyuan-A13B: newline-inclusive think markers, content in <answer>\\n...\\n</answer>."""
    m = check_chunkings(text, reasoning_parser="hunyuan_a13b")
    assert (m.reasoning_content or None, m.content or None) == (reasoning, content)


def test_hunyuan_a13b_call_inside_the_answer() -> None:
    """A Hunyuan call inside the answer wrapper is parsed; the wrapper is not content."""
    call = '<tool_calls>[{"name": "f", "arguments": {"a": 1}}]</tool_calls>'
    text = f"<think>\nplan\n</think>\n<answer>\n{call}\n</answer>"
    m = check_chunkings(text, reasoning_parser="hunyuan_a13b", tool_parser="hunyuan_a13b")
    assert (m.reasoning_content, m.content or None) == ("plan", None)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": 1}')]


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        ("abc</think>def", "abc", "def"),
        ("abc", "abc", None),
        ("abc\n</think>\n\n<response>\ndef\n</response>\n", "abc\n", "\ndef\n\n"),
        ("abc</think>\n<response>x</response>y</response>", "abc", "xy</response>"),
        ("abc</think>\ndef\n", "abc", "\ndef\n"),
    ],
)
def test_ernie45(text: str, reasoning: str | None, content: str | None) -> None:
    """ERNIE-4.5 thinking: starts inside reasoning; a <response> wrapper around the content is dropped."""
    m = check_chunkings(text, reasoning_parser="ernie45")
    assert (m.reasoning_content or None, m.content or None) == (reasoning, content)


def test_ernie45_reasoning_and_tools_in_one_chunk() -> None:
    """ERNIE-4.5: reasoning and a <tool_call> after </think> in one chunk."""
    text = 'plan\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
    m = check_chunkings(text, reasoning_parser="ernie45", tool_parser="ernie45")
    assert m.reasoning_content == "plan\n"
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("f", '{"a": 1}')]


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        (
            "<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_RESPONSE|>Hello!<|END_RESPONSE|>",
            "I'm\nthinking",
            "Hello!",
        ),
        ("<|START_THINKING|><|END_THINKING|><|START_RESPONSE|>Hi<|END_RESPONSE|>", None, "Hi"),
        ("<|START_RESPONSE|>Hi<|END_RESPONSE|>", None, "Hi"),
        ("Hi", None, "Hi"),
    ],
)
def test_command_r7b(text: str, reasoning: str | None, content: str | None) -> None:
    """Command R7B: thinking block, then the response wrapper dropped."""
    m = check_chunkings(text, reasoning_parser="command_r7b")
    assert (m.reasoning_content or None, m.content or None) == (reasoning, content)


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        ("<think>reasoning</think>\n\n\nHello", "reasoning", "Hello"),
        ("r</think>\nA\nB\n", "r", "A\nB\n"),
        ("r</think> \nA", "r", " \nA"),
        ("still", "still", None),
    ],
)
def test_granite_thinking_parser(text: str, reasoning: str | None, content: str | None) -> None:
    """Granite 4.2 thinking: Nemotron 3's protocol with the newlines after </think> dropped."""
    m = check_chunkings(text, reasoning_parser="granite_thinking_parser")
    assert (m.reasoning_content or None, m.content or None) == (reasoning, content)


@pytest.mark.parametrize("name", ("gemma4", "hunyuan_a13b", "ernie45", "command_r7b", "granite_thinking_parser"))
def test_unverified_tokenizers_declare_every_prefix(name: str) -> None:
    """Without a reference tokenizer, every proper prefix of every marker, label and wrapper tag is declared."""
    spec = registry.get_reasoning_dialect(name)
    tags = (spec.start, spec.end, *(spec.content_wrap or ()))
    assert set(all_prefixes(*tags)) <= set(spec.token_prefixes)
    opener, closer = spec.content_wrap or ("", "")
    text = f"{spec.start}thought\nplan{spec.end}\n{opener}ok{closer}"
    want = message_key(parse_complete(text, reasoning_parser=name))
    for cut in range(1, len(text)):
        got = accumulate(feed_chunks(split_at(text, [cut]), reasoning_parser=name, chunking="tokens"))
        assert message_key(got) == want, (name, cut)


# -- minimax_m2_append_think (vLLM's name): no split, the prompt's <think> put back -------------------
def test_append_think_keeps_the_reasoning_in_the_content_with_its_opener() -> None:
    """The whole output is content, with the prompt's <think> in front; nothing goes to reasoning."""
    msg = check_chunkings("Let me think\n</think>\n\nThe answer.", reasoning_parser="minimax_m2_append_think")
    assert msg.content == "<think>Let me think\n</think>\n\nThe answer."
    assert not msg.reasoning_content


def test_append_think_with_tools_parses_the_call_after_the_thinking() -> None:
    """Calls after the thinking are still parsed; the thinking and the text before the block stay content."""
    call = '<minimax:tool_call><invoke name="f"><parameter name="a">1</parameter></invoke></minimax:tool_call>'
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                             "properties": {"a": {"type": "integer"}}}}}]
    msg = check_chunkings(f"plan</think>ok{call}", tool_parser="minimax_m2", reasoning_parser="minimax_m2_append_think",
                          tools=tools)
    assert msg.content == "<think>plan</think>ok"
    assert [(c.function.name, c.function.arguments) for c in msg.tool_calls] == [("f", '{"a": 1}')]


def test_append_think_puts_nothing_back_for_an_empty_output_or_without_thinking() -> None:
    """An empty output stays empty; with enable_thinking=False the output is content as written."""
    assert not check_chunkings("", reasoning_parser="minimax_m2_append_think").content
    msg = check_chunkings("plain</think>x", reasoning_parser="minimax_m2_append_think", enable_thinking=False)
    assert msg.content == "plain</think>x"


@pytest.mark.parametrize(
    ("text", "reasoning", "content"),
    [
        ("a\n\n</think>\nb", "a", "\nb"),
        ("a\nb\n</think>", "a\nb", None),
        ("a\n\n", "a\n\n", None),  # no end marker: the newlines are reasoning
        ("x\n</think>y", "x", "y"),
        ("\n</think>x", "\n", "x"),  # blanks at the very start are reasoning before the end marker is looked for
        ("a\n\nb", "a\n\nb", None),
        ("a" + "\n" * 300 + "</think>", "a" + "\n" * 300, None),  # too long a run to be framing: kept
    ],
)
def test_step3p5_drops_newlines_before_the_end_marker(text: str, reasoning: str | None, content: str | None) -> None:
    """Step-3.5's newlines right before ``</think>`` are framing, dropped on every chunking; others are kept (a
    run longer than 256 too)."""
    m = check_chunkings(text, reasoning_parser="step3p5")
    assert (m.reasoning_content, m.content) == (reasoning, content)
