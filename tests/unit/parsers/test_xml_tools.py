"""The coding-agent tag protocol (``xml_tools``): the consumed-prefix contract, Cline's rules, and block snapshots.

There are no peer corpus vectors for this dialect; the cases below are
modelled on the behaviour of Cline's ``parse-assistant-message.ts``
(shared/dialects.md section 13) and its tests: tool and parameter tags from
a closed list, trimmed values, ``</content>`` inside file text, unknown tags
as text, unterminated calls at the end.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from deltaflow import ChatMessage, ResponseParser, accumulate, parse_complete
from deltaflow.items import Channel, ChannelText, ChunkEnd, ToolDelta
from deltaflow.messages import DeltaFunctionCall, DeltaMessage, DeltaToolCall
from deltaflow.parsers import DriverContext, declare, registry
from deltaflow.parsers.drivers.tag_per_tool import BlockSnapshot, Snapshotter, TagPerToolDriver, TagPerToolFormat
from deltaflow.pipeline.chain import SyncChain
from deltaflow.stages.assembler import DeltaAssembler
from deltaflow.stages.identity import IdentityFirstBuffer
from deltaflow.stages.name_filter import NameFilter
from deltaflow.stages.reasoning import ReasoningSplitter
from deltaflow.stages.router import ChannelRouter
from deltaflow.stages.tool_feeder import ToolBlockFeeder
from deltaflow.testing import check_chunkings, feed_chunks, message_key, random_chunks, split_at
from deltaflow.tools import ToolSpec, normalize_tools

# Cline's tools (shared/dialects.md section 13), as a request would offer them.
CLINE: dict[str, tuple[str, ...] | None] = {
    "read_file": ("path",),
    "write_to_file": ("path", "content", "line_count"),
    "replace_in_file": ("path", "diff"),
    "execute_command": ("command", "requires_approval"),
    "search_files": ("path", "regex", "file_pattern"),
    "browser_action": ("action", "url"),
    "use_mcp_tool": ("server_name", "tool_name", "arguments"),
    "attempt_completion": None,  # a schema without properties: any tag is a parameter
    "list_tools": (),  # a schema with no parameters at all
}


def tool_defs(tools: dict[str, tuple[str, ...] | None] = CLINE) -> list[dict[str, Any]]:
    """OpenAI-format definitions of ``tools`` (string parameters)."""
    out = []
    for name, params in tools.items():
        schema: dict[str, Any] = {"type": "object"}
        if params is not None:
            schema["properties"] = {p: {"type": "string"} for p in params}
        out.append({"type": "function", "function": {"name": name, "parameters": schema}})
    return out


TOOLS = tool_defs()
KW: dict[str, Any] = {"tool_parser": "xml_tools", "tools": TOOLS}


def calls(text: str, **kwargs: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, decoded arguments) of the calls in ``text``, checked on every chunking."""
    m = check_chunkings(text, **{**KW, **kwargs})
    return [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls]


def content(text: str, **kwargs: Any) -> str | None:
    """The content of ``text``, checked on every chunking."""
    return check_chunkings(text, **{**KW, **kwargs}).content


DEFAULT_FORMAT = TagPerToolFormat()


def new_parser(spec: TagPerToolFormat = DEFAULT_FORMAT, counter: itertools.count[int] | None = None) -> TagPerToolDriver:
    """A parser for one block, offered Cline's tools."""
    specs = normalize_tools(TOOLS)
    assert specs is not None
    numbers = counter if counter is not None else itertools.count()
    ctx = DriverContext(
        channel=Channel.CONTENT, new_call=lambda: next(numbers), tools={s.name: s for s in specs}, dialect="xml_tools"
    )
    return TagPerToolDriver(ctx, spec)


# -- registration ---------------------------------------------------------------------------


def test_registered_with_its_declarations() -> None:
    """``xml_tools`` is registered; its only opener is ``<``, which has no proper prefix to declare."""
    d = registry.get_tool_dialect("xml_tools")
    assert d.openers == () and d.openers_for is not None and isinstance(d.format, TagPerToolFormat)
    assert d.token_prefixes == () and d.start_openers == ()
    assert d.description and d.families


def test_openers_for_a_request() -> None:
    """The exact openers of a request are ``<NAME>`` per offered tool, none without tools."""
    specs = {s.name: s for s in normalize_tools(tool_defs({"read_file": ("path",), "f": None})) or ()}
    openers = registry.get_tool_dialect("xml_tools").openers_for
    assert openers is not None
    assert openers(specs) == ("<read_file>", "<f>")
    assert openers(None) == () and openers({}) == ()


# -- Cline's parse-assistant-message cases ----------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A text and the calls and content it must give."""

    label: str
    text: str
    calls: list[tuple[str, dict[str, str]]]
    content: str | None


CASES = [
    Case("simple", "<read_file><path>src/file.ts</path></read_file>", [("read_file", {"path": "src/file.ts"})], None),
    Case(
        "several parameters",
        "<search_files><path>src</path><regex>foo</regex><file_pattern>*.ts</file_pattern></search_files>",
        [("search_files", {"path": "src", "regex": "foo", "file_pattern": "*.ts"})],
        None,
    ),
    Case(
        "newlines around tags",
        "<read_file>\n<path>\nsrc/main.js\n</path>\n</read_file>",
        [("read_file", {"path": "src/main.js"})],
        None,
    ),
    Case("values trimmed", "<read_file><path>  src/file.ts \t</path></read_file>", [("read_file", {"path": "src/file.ts"})], None),
    Case("empty value", "<read_file><path>  </path></read_file>", [("read_file", {"path": ""})], None),
    Case(
        "text before",
        "Here's the file content: <read_file><path>a.ts</path></read_file>",
        [("read_file", {"path": "a.ts"})],
        "Here's the file content: ",
    ),
    Case(
        "text after",
        "<read_file><path>a.ts</path></read_file>Here's what I found.",
        [("read_file", {"path": "a.ts"})],
        "Here's what I found.",
    ),
    Case(
        "calls separated by text",
        "First: <read_file><path>1.ts</path></read_file>Second: <read_file><path>2.ts</path></read_file>",
        [("read_file", {"path": "1.ts"}), ("read_file", {"path": "2.ts"})],
        "First: Second: ",
    ),
    Case(
        "consecutive calls",
        "<read_file><path>1.ts</path></read_file>\n\n<read_file><path>2.ts</path></read_file>",
        [("read_file", {"path": "1.ts"}), ("read_file", {"path": "2.ts"})],
        None,
    ),
    Case(
        "content with its own closing tag",
        "<write_to_file><path>src/file.ts</path><content>\nfunction f() {\n// XML-like: </content>\nreturn true;\n}\n"
        "</content><line_count>5</line_count></write_to_file>",
        [("write_to_file", {
            "path": "src/file.ts",
            "content": "function f() {\n// XML-like: </content>\nreturn true;\n}",
            "line_count": "5",
        })],
        None,
    ),
    Case(
        "diff with its own closing tag",
        "<replace_in_file><path>a.md</path><diff>\n------- SEARCH\nsee </diff>\n=======\nsee below\n+++++++ REPLACE\n"
        "</diff></replace_in_file>",
        [("replace_in_file", {
            "path": "a.md", "diff": "------- SEARCH\nsee </diff>\n=======\nsee below\n+++++++ REPLACE",
        })],
        None,
    ),
    Case(
        "tool closer inside content before any candidate",
        "<write_to_file><path>x.xml</path><content>a </write_to_file> b</content></write_to_file>",
        [("write_to_file", {"path": "x.xml", "content": "a </write_to_file> b"})],
        None,
    ),
    Case(
        "tool closer after a fake candidate ends the call",
        "<write_to_file><content>a</content> b </write_to_file> c</content></write_to_file>",
        [("write_to_file", {"content": "a"})],
        " c</content></write_to_file>",
    ),
    Case("unknown tag is text", "This has a <not_a_tool>malformed tag</not_a_tool>", [],
         "This has a <not_a_tool>malformed tag</not_a_tool>"),
    Case("no parameters", "<browser_action></browser_action>", [("browser_action", {})], None),
    Case("schema without parameters", "<list_tools>\n<path>x</path>\n</list_tools>", [("list_tools", {})], None),
    Case(
        "schema without properties takes any tag",
        "<attempt_completion>\n<result>Done.</result>\n<x.y>1</x.y>\n</attempt_completion>",
        [("attempt_completion", {"result": "Done.", "x.y": "1"})],
        None,
    ),
    Case(
        "tool tags inside a value",
        "<execute_command><command>echo '<read_file><path>t.txt</path></read_file>'</command>"
        "<requires_approval>false</requires_approval></execute_command>",
        [("execute_command", {
            "command": "echo '<read_file><path>t.txt</path></read_file>'", "requires_approval": "false",
        })],
        None,
    ),
    Case(
        "XML-like value",
        "<search_files><regex><div>.*</div></regex><path>src</path></search_files>",
        [("search_files", {"regex": "<div>.*</div>", "path": "src"})],
        None,
    ),
    Case(
        "unknown tags between parameters belong to the call",
        "<read_file>\n<note>see <this></note>\n<path>a</path> trailing words\n</read_file>",
        [("read_file", {"path": "a"})],
        None,
    ),
    Case(
        "repeated parameter kept",
        "<read_file><path>a</path><path>b</path></read_file>",
        [("read_file", {"path": "b"})],  # json.loads keeps the last; the text keeps both (see below)
        None,
    ),
    Case("attributes are text", '<read_file class="x"><path>t.txt</path></read_file>', [],
         '<read_file class="x"><path>t.txt</path></read_file>'),
    Case("spaces in tags are text", "< read_file >< path >t< /path >< /read_file >", [],
         "< read_file >< path >t< /path >< /read_file >"),
    Case(
        "HTML comment around a call (as Cline)",
        "<!-- <read_file><path>t</path></read_file> -->",
        [("read_file", {"path": "t"})],
        "<!--  -->",
    ),
    Case(
        "markdown link around a call (as Cline)",
        "[Example](<read_file><path>t</path></read_file>)",
        [("read_file", {"path": "t"})],
        "[Example]()",
    ),
    Case("case matters", "<READ_FILE><path>t</path></READ_FILE>", [], "<READ_FILE><path>t</path></READ_FILE>"),
    Case("thinking tags are prose", "<thinking>I need the file.</thinking>\n<read_file><path>a</path></read_file>",
         [("read_file", {"path": "a"})], "<thinking>I need the file.</thinking>\n"),
    Case("stray angle brackets", "if a < b and c<d or x <= y: <<read_file><path>p</path></read_file>",
         [("read_file", {"path": "p"})], "if a < b and c<d or x <= y: <"),
    Case("empty output", "", [], None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_cline_cases(case: Case) -> None:
    """Each case gives its calls and content, on every chunking."""
    m = check_chunkings(case.text, **KW)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == case.calls
    assert m.content == case.content


def test_arguments_text_is_streamed_json_of_strings() -> None:
    """Arguments are ``{"key": "value", ...}`` in the model's order, values JSON-escaped, repeated keys kept."""
    m = check_chunkings('<read_file><path>a "q" \\ 天\n</path><path>b</path></read_file>', **KW)
    assert m.tool_calls[0].function.arguments == '{"path": "a \\"q\\" \\\\ 天", "path": "b"}'


# -- what is not a call ------------------------------------------------------------------------


def test_unoffered_tool_is_text() -> None:
    """A tag of a tool the request did not offer is text, whole, and its inner calls still count."""
    text = "<new_task><context>x <read_file><path>a</path></read_file></context></new_task>"
    m = check_chunkings(text, **KW)
    assert m.content == "<new_task><context>x </context></new_task>"
    assert [c.function.name for c in m.tool_calls] == ["read_file"]


def test_without_tools_everything_is_text() -> None:
    """Without ``tools`` there is nothing to detect: every tag is content."""
    text = "<read_file><path>a</path></read_file> and <write_to_file>"
    m = check_chunkings(text, tool_parser="xml_tools")
    assert m.content == text and m.tool_calls == []


def test_partial_opener_at_the_end_is_text() -> None:
    """A partial opener cut off by the end of the output is text."""
    for text in ["see <", "see <read_fi", "see <read_file", "see </"]:
        assert content(text) == text


def test_whitespace_after_a_stray_bracket_is_not_swallowed() -> None:
    """Whitespace after a non-call ``<`` stays text even when a call follows it."""
    assert content("a <\n\n<read_file><path>q</path></read_file>") == "a <\n\n"


def test_whitespace_between_calls_is_swallowed_and_after_the_last_kept() -> None:
    """Whitespace between two calls is raw text of the second (as for every dialect); after the last, it is content."""
    m = check_chunkings("<read_file><path>1</path></read_file>\n \n<read_file><path>2</path></read_file>\n", **KW)
    assert len(m.tool_calls) == 2 and m.content == "\n"


def test_non_calls_take_no_call_numbers() -> None:
    """A ``<`` that opens no call costs no call number and goes out as text, in order."""
    specs = normalize_tools(TOOLS)
    assert specs is not None
    feeder = ToolBlockFeeder(registry.get_tool_dialect("xml_tools"), tools={s.name: s for s in specs})
    text = "x < y, <b>bold</b> <!-- c --> <<>> " * 20
    out: list[object] = []
    for piece in random_chunks(text, 3):
        out += feeder.feed(ChannelText(Channel.CONTENT, piece))
    out += feeder.finish()
    assert feeder.calls == 0
    assert all(isinstance(o, ChannelText) for o in out)
    assert "".join(o.text for o in out if isinstance(o, ChannelText)) == text


# -- unterminated and malformed calls ----------------------------------------------------------


def test_unterminated_call_is_completed_at_the_end() -> None:
    """A call cut off at the end is emitted with what it had: an open value takes the rest, trimmed."""
    assert calls("<read_file><path>src/file.ts</path>") == [("read_file", {"path": "src/file.ts"})]
    assert calls("<read_file><path>src/file.ts  ") == [("read_file", {"path": "src/file.ts"})]
    assert calls("<read_file><path>") == [("read_file", {"path": ""})]
    assert calls("<read_file>") == [("read_file", {})]
    assert calls("<read_file><pa") == [("read_file", {})]


def test_cut_closing_tag_is_part_of_the_value_at_the_end() -> None:
    """Input that ends inside a value gives the rest of the text to it, as Cline does, a cut ``</pa`` included."""
    assert calls("<read_file><path>a.py</pa") == [("read_file", {"path": "a.py</pa"})]


def test_missing_parameter_closer_runs_to_the_end() -> None:
    """A value whose closing tag never comes takes the rest of the output (Cline's rule)."""
    m = check_chunkings("<read_file><path>a.py</read_file> and more", **KW)
    assert [json.loads(c.function.arguments) for c in m.tool_calls] == [{"path": "a.py</read_file> and more"}]
    assert m.content is None


def test_malformed_final_payload_after_text() -> None:
    """Text, then a call cut inside a content value: the text is content, the call keeps the value so far."""
    m = check_chunkings("Writing it.\n<write_to_file><path>a.py</path><content>\nprint(1)\n</cont", **KW)
    assert m.content == "Writing it.\n"
    assert json.loads(m.tool_calls[0].function.arguments) == {"path": "a.py", "content": "print(1)\n</cont"}


# -- channels and chunkings ---------------------------------------------------------------------


def test_reasoning_and_tools_in_one_chunk() -> None:
    """Reasoning, a call and text in one chunk: each lands in its channel, on every chunking."""
    text = "I should read it.</think>\nOK: <read_file><path>a.py</path></read_file> done"
    m = check_chunkings(text, reasoning_parser="qwen3", **KW)
    assert m.reasoning_content == "I should read it."
    assert m.content == "\nOK:  done"
    assert [c.function.name for c in m.tool_calls] == ["read_file"]


def test_call_inside_reasoning() -> None:
    """A call that ends unclosed reasoning is a call; one the model goes on thinking after stays reasoning text."""
    m = check_chunkings("hmm <read_file><path>a</path></read_file>", reasoning_parser="qwen3", **KW)
    assert m.reasoning_content == "hmm " and m.content is None
    assert len(m.tool_calls) == 1
    m = check_chunkings("hmm <read_file><path>a</path></read_file> ok</think>answer", reasoning_parser="qwen3", **KW)
    assert m.reasoning_content == "hmm <read_file><path>a</path></read_file> ok" and m.content == "answer"
    assert m.tool_calls == []


def test_partial_opener_does_not_span_a_reasoning_marker() -> None:
    """A ``<`` at the end of reasoning stays reasoning; ``read_file>`` after ``</think>`` is content, not a call."""
    m = check_chunkings("think <</think>read_file><path>a</path></read_file>", reasoning_parser="qwen3", **KW)
    assert m.reasoning_content == "think <"
    assert m.content == "read_file><path>a</path></read_file>" and m.tool_calls == []


REALISTIC = (
    "<thinking>The user wants a greeting script.</thinking>\n\n"
    "I'll create the file.\n\n"
    "<write_to_file>\n<path>hello.py</path>\n<content>\n"
    "def main() -> None:\n    print(\"<content>hi</content>\")  # tags in a string\n\n\nmain()\n"
    "</content>\n<line_count>4</line_count>\n</write_to_file>\n\n"
    "<execute_command>\n<command>python hello.py && echo '</command>'</command>\n"
    "<requires_approval>false</requires_approval>\n</execute_command>\n"
)


def test_every_split_point() -> None:
    """Every two-chunk split of a realistic output (tags are plain text: any split is a token boundary) gives the same message."""
    want = message_key(parse_complete(REALISTIC, **KW))
    for i in range(len(REALISTIC) + 1):
        got = message_key(accumulate(feed_chunks(split_at(REALISTIC, [i]), **KW)))
        assert got == want, f"split at {i}"
    assert [c for _, c, _ in want[2]] == ["write_to_file", "execute_command"]
    args = json.loads(want[2][0][2])
    assert args["content"].endswith("main()") and "<content>hi</content>" in args["content"]
    assert json.loads(want[2][1][2])["command"] == "python hello.py && echo '"


def test_tokens_chunking_agrees() -> None:
    """``chunking="tokens"`` holds the same partial tags (the driver holds them itself) and gives the same message."""
    m = check_chunkings(REALISTIC, chunking="tokens", **KW)
    assert message_key(m) == message_key(parse_complete(REALISTIC, **KW))


# -- the consumed-prefix contract -----------------------------------------------------------


def test_not_a_call_passes_text_to_the_next_bracket() -> None:
    """A ``<`` that opens no call is passed on as text with what follows it up to the next ``<``, without a call number."""
    counter = itertools.count()
    p = new_parser(counter=counter)
    out: list[object] = []
    text = "<b>bold</b>"
    end = p.feed_tool_block(text, out, False)
    assert p.done and end == 7 and out == [ChannelText(Channel.CONTENT, "<b>bold")]
    assert next(counter) == 0


def test_not_a_call_at_a_chunk_end_waits_and_may_end_at_a_channel_change() -> None:
    """Text after a non-call ``<`` that reaches the chunk end is passed on, and the block stays open until the input ends."""
    p = new_parser()
    out: list[object] = []
    assert p.feed_tool_block("< b ", out, False) == 4
    assert not p.done and out == [ChannelText(Channel.CONTENT, "< b ")]
    assert p.feed_tool_block("", out, True) == 0 and p.done


def test_unconsumed_tail_is_short_while_streaming() -> None:
    """Fed one character at a time, a call leaves at most a partial tag (or a held candidate) unconsumed."""
    text = (
        "<write_to_file>\n<path>a.txt</path>\n<content>\n" + "lorem ipsum </conte dolor\n" * 40
        + "</content>\n</write_to_file>"
    )
    p = new_parser()
    buf = ""
    events: list[object] = []
    for ch in text:
        buf += ch
        end = p.feed_tool_block(buf, events, False)
        buf = buf[end:]
        if p.done:
            break
        assert len(buf) <= len("</write_to_file>") + len("</content>") + 2, repr(buf)
    assert p.done and buf == ""
    args = "".join(e.args for e in events if isinstance(e, ToolDelta))
    assert json.loads(args)["content"] == ("lorem ipsum </conte dolor\n" * 40).strip()


def test_final_always_ends_the_block() -> None:
    """With final=True the parser is done, whatever it was given."""
    for text in ["<", "<read_fi", "<read_file>", "<read_file><pa", "<read_file><path>x</pa",
                 "<write_to_file><content>x</content>  ", "< "]:
        p = new_parser()
        p.feed_tool_block(text, [], True)
        assert p.done, text


# -- the candidate hold bound ------------------------------------------------------------------


SMALL = TagPerToolFormat(hold_limit=16)
WTF_TOOLS = normalize_tools(tool_defs({"write_to_file": ("path", "content", "task_progress")}))


def run_chain(chunks: Sequence[str], spec: TagPerToolFormat) -> ChatMessage:
    """Run the stage chain with an unregistered ``xml_tools`` dialect declared with ``spec``."""
    assert WTF_TOOLS is not None
    by_name: dict[str, ToolSpec] = {s.name: s for s in WTF_TOOLS}
    dialect = declare("xml_tools_test", spec, register=False)
    chain = SyncChain([
        ChannelRouter(), ReasoningSplitter(None), ToolBlockFeeder(dialect, tools=by_name),
        IdentityFirstBuffer(), NameFilter(by_name), DeltaAssembler(),
    ])
    deltas = []
    for c in chunks:
        deltas += chain.run([c, ChunkEnd()] if c else [ChunkEnd()])
    deltas += chain.finish([ChunkEnd()])
    return accumulate(deltas)


def bounded(text: str, spec: TagPerToolFormat = SMALL) -> ChatMessage:
    """Parse ``text`` with ``spec`` on several chunkings; all must agree."""
    whole = run_chain([text], spec)
    for chunks in [list(text), *(random_chunks(text, s) for s in range(5))]:
        assert message_key(run_chain(chunks, spec)) == message_key(whole)
    return whole


def test_bound_long_file_text_after_a_fake_candidate() -> None:
    """Past the bound, file text after a candidate makes it file text; the real end is still found later."""
    body = "a </content> " + "x" * 40 + "\nend"
    m = bounded(f"<write_to_file><content>{body}</content></write_to_file>")
    assert json.loads(m.tool_calls[0].function.arguments) == {"content": body}


def test_bound_long_parameter_after_the_real_end() -> None:
    """Past the bound, a parameter tag after a candidate makes it the end; the parameter streams."""
    progress = "- [x] one\n" * 10
    m = bounded(f"<write_to_file><content>abc</content>\n<task_progress>{progress}</task_progress></write_to_file>")
    assert json.loads(m.tool_calls[0].function.arguments) == {"content": "abc", "task_progress": progress.strip()}


def test_bound_only_whitespace_after_the_candidate() -> None:
    """Past the bound, only whitespace after a candidate makes it the end."""
    m = bounded("<write_to_file><content>abc</content>" + " \n" * 20 + "</write_to_file>")
    assert json.loads(m.tool_calls[0].function.arguments) == {"content": "abc"}


def test_bound_is_the_documented_deviation() -> None:
    """Within the bound the strict last-``</content>`` rule holds; past it, long junk after the real end joins the value."""
    junk = "not a tag " * 3
    text = f"<write_to_file><content>abc</content>{junk}</write_to_file>"
    strict = bounded(text, TagPerToolFormat())
    assert json.loads(strict.tool_calls[0].function.arguments) == {"content": "abc"}
    small = bounded(text)
    assert json.loads(small.tool_calls[0].function.arguments) == {"content": "abc</content>" + junk.rstrip()}


def test_default_bound_keeps_the_strict_rule_for_long_fake_tails() -> None:
    """With the default bound, file text of 1000 characters after a fake ``</content>`` stays in the value."""
    body = "x </content> " + "y" * 1000
    m = bounded(f"<write_to_file><content>{body}</content></write_to_file>", TagPerToolFormat())
    assert json.loads(m.tool_calls[0].function.arguments) == {"content": body}


def test_held_candidate_is_bounded() -> None:
    """While a candidate is undecided, the unconsumed text never exceeds the bound plus the tags."""
    p = new_parser(SMALL)
    text = "<write_to_file><content>a</content>" + "z" * 100 + "</content></write_to_file>"
    buf = ""
    for ch in text:
        buf += ch
        end = p.feed_tool_block(buf, [], False)
        buf = buf[end:]
        assert len(buf) <= SMALL.hold_limit + len("</content>") + len("</write_to_file>"), len(buf)
    assert p.done


# -- block snapshots -------------------------------------------------------------------------


def stream_snapshots(text: str, chunks: Sequence[str], **kwargs: Any) -> list[list[BlockSnapshot]]:
    """The snapshot after each chunk, and the final one last."""
    parser = ResponseParser(**{**KW, **kwargs})
    snap = Snapshotter()
    out = [snap.update(parser.feed(c)) for c in chunks]
    out.append(snap.update(parser.feed("", final=True), final=True))
    return out


def test_snapshot_shows_the_open_call_as_partial() -> None:
    """While a write streams, the last block is a partial tool_use whose content grows; the text before is complete."""
    text = "Creating it.\n<write_to_file>\n<path>a.py</path>\n<content>\nprint('</content>')\nx = 1\n</content>\n</write_to_file>"
    cut = text.index("x = 1") + 3
    shots = stream_snapshots(text, [text[:cut], text[cut:]])
    first = shots[0]
    assert [b.type for b in first] == ["text", "tool_use"]
    assert first[0] == BlockSnapshot(type="text", partial=False, content="Creating it.\n")
    assert first[1].partial and first[1].name == "write_to_file"
    # The text after the candidate </content> is held until the next </content> decides it.
    assert dict(first[1].params) == {"path": "a.py", "content": "print('"}
    last = shots[-1]
    assert not any(b.partial for b in last)
    assert dict(last[1].params) == {"path": "a.py", "content": "print('</content>')\nx = 1"}


def test_snapshot_text_is_partial_while_last() -> None:
    """A text block is partial while it is the last block of an unfinished stream; a partial tag is not shown."""
    shots = stream_snapshots("Hello <read_fi", ["Hello <read_fi"])
    assert shots[0] == [BlockSnapshot(type="text", partial=True, content="Hello ")]
    assert shots[-1] == [BlockSnapshot(type="text", partial=False, content="Hello <read_fi")]


def test_snapshot_closed_call_is_not_partial_before_the_end() -> None:
    """A call whose closing tag arrived is complete even though the stream goes on."""
    text = "<read_file><path>a</path></read_file>"
    shots = stream_snapshots(text, [text])
    assert shots[0] == [BlockSnapshot(type="tool_use", partial=False, name="read_file", params={"path": "a"}, index=0)]


def test_snapshot_per_character_and_final_equals_complete() -> None:
    """Per-character snapshots are well formed, at most the last block is partial, and the final one is parse_complete's message."""
    shots = stream_snapshots(REALISTIC, list(REALISTIC), reasoning_parser=None)
    for blocks in shots[:-1]:
        assert all(not b.partial for b in blocks[:-1])
    final = shots[-1]
    m = parse_complete(REALISTIC, **KW)
    assert "".join(b.content for b in final if b.type == "text") == m.content
    assert [(b.name, dict(b.params)) for b in final if b.type == "tool_use"] == [
        (c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls
    ]
    assert [b.type for b in final] == ["text", "tool_use", "tool_use", "text"]


def test_snapshot_reasoning_blocks_and_dicts() -> None:
    """Reasoning has blocks of its own; ``to_dict`` gives Cline's shapes."""
    shots = stream_snapshots("why</think>so <read_file><path>p", ["why</think>so <read_file><path>p"],
                             reasoning_parser="qwen3")
    assert [b.to_dict() for b in shots[0]] == [
        {"type": "reasoning", "content": "why", "partial": False},
        {"type": "text", "content": "so ", "partial": False},
        {"type": "tool_use", "name": "read_file", "params": {"path": "p"}, "partial": True},
    ]
    assert shots[-1][-1].to_dict() == {"type": "tool_use", "name": "read_file", "params": {"path": "p"}, "partial": False}


def test_snapshot_of_another_dialect() -> None:
    """The snapshot consumes deltas of any dialect: a Hermes call's partial JSON is closed at its last safe position."""
    parser = ResponseParser(tool_parser="hermes")
    snap = Snapshotter()
    blocks = snap.update(parser.feed('<tool_call>{"name": "f", "arguments": {"a": [1, 2], "b": "x\\u00e'))
    assert blocks[-1].partial and dict(blocks[-1].params) == {"a": [1, 2], "b": "x"}
    blocks = snap.update(parser.feed('9"}}</tool_call>', final=True), final=True)
    assert blocks == [BlockSnapshot(type="tool_use", partial=False, name="f", params={"a": [1, 2], "b": "xé"}, index=0)]


def test_hold_limit_must_be_positive() -> None:
    """A candidate window must hold at least one character."""
    with pytest.raises(ValueError, match="hold_limit must be a positive int"):
        TagPerToolFormat(hold_limit=0)


def test_snapshot_tolerates_odd_deltas() -> None:
    """A name in a later delta is taken; arguments that are not JSON, or not an object, give empty params."""
    def call(index: int, name: str | None, args: str) -> DeltaMessage:
        return DeltaMessage(tool_calls=[DeltaToolCall(index=index, function=DeltaFunctionCall(name=name, arguments=args))])

    snap = Snapshotter()
    blocks = snap.update([call(0, None, '{"a": "x'), call(0, "f", '"}'), call(0, None, " trailing"),
                          call(1, "g", "[1, 2]"), call(2, "h", "{nope")], final=True)
    assert [(b.name, dict(b.params)) for b in blocks] == [("f", {}), ("g", {}), ("h", {})]
    snap = Snapshotter()
    assert snap.update([call(0, "f", '{"a": "x'), call(0, None, '"}')]) == [
        BlockSnapshot(type="tool_use", partial=False, name="f", params={"a": "x"}, index=0)
    ]
