"""No call for what is not a call: a call is emitted only once committed (the identity stage's rule).

A call is committed once its name is complete and its argument payload has
validly begun. Before that, a block that breaks or that the output cuts short
is surfaced whole as text, for every dialect (CONFORMANCE.md, "Truncated and
malformed calls").
"""

from __future__ import annotations

import pytest

from deltaflow import UnknownParserError, parse_complete
from deltaflow.items import ToolDelta
from deltaflow.pipeline.sync import default_stages
from deltaflow.testing import check_chunkings, corpus_vectors, shared_dir, vector_thinking

# One block per driver family: (tool parser, text whose payload never begins after the name).
NEVER_BEGUN = [
    ("pythonic", '[get_weather(city=__import__("os").system("id"))]'),
    ("pythonic", "[get_weather("),
    ("llama4_pythonic", "[get_weather(1)]"),
    ("olmo3", "<function_calls>get_weather(city=open('x'))</function_calls>"),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": "rm -rf /"}</tool_call>'),
    ("hermes", '<tool_call>{"name": "get_weather"'),
    ("llama3_json", '{"name": "get_weather", "parameters": 12}'),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]os.system("id")'),
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": nul'),
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"),
    ("deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>[1]<｜tool▁call▁end｜>"),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n"),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\nos.system('id')\n</function>\n</tool_call>"),
    ("glm45", "<tool_call>get_weather\n"),
    ("minimax_m2", '<minimax:tool_call><invoke name="get_weather">'),
    ("minimax_m3", ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">junk]<]minimax[>[</invoke>'),
    ("deepseek_v32", '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'),
    ("kimi_k3", '<|open|>tools<|sep|><|open|>call tool="get_weather"<|sep|>'),
    ("openai", "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"),
    ("openai", "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>rm -rf /<|call|>"),
    ("gemma4", "<|tool_call>call:get_weather{"),
    ("functionary_v3_2", ">>>get_weather\n"),
]


@pytest.mark.parametrize(("tool_parser", "text"), NEVER_BEGUN)
def test_a_payload_that_never_began_is_no_call_and_is_surfaced_whole(tool_parser: str, text: str) -> None:
    """Named, then broken or cut before the arguments began: no call on any chunking, and no text lost."""
    m = check_chunkings(text, tool_parser=tool_parser)
    assert m.tool_calls == []
    assert text.endswith(m.content or "") and len(m.content or "") >= len(text) - len("<|start|>assistant")


COMMITTED = [
    ("pythonic", "[get_weather()]", "{}"),
    ("pythonic", "[get_weather(city='Paris', n=os.system)]", '{"city": "Paris"}'),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": tru', "{}"),
    ("hermes", '<tool_call>{"name": "get_weather"}</tool_call>', "{}"),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", "{}"),
    ("mistral", "[TOOL_CALLS]get_weather", "{}"),  # a Mistral v11 call closed by the end of the turn
]


@pytest.mark.parametrize(("tool_parser", "text", "arguments"), COMMITTED)
def test_a_committed_call_is_completed(tool_parser: str, text: str, arguments: str) -> None:
    """Once its payload began (or the block closed it), a call is emitted and completed as written."""
    m = check_chunkings(text, tool_parser=tool_parser)
    assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_weather", arguments)]


def test_the_name_waits_for_the_first_argument_fragment() -> None:
    """Streaming: the first delta with the name is the one that carries the first argument text."""
    from deltaflow import ResponseParser

    p = ResponseParser("hermes")
    assert [d for d in p.feed('<tool_call>{"name": "get_weather", "arguments": ') if d.tool_calls] == []
    (first,) = [tc for d in p.feed('{"city": "Pa') for tc in d.tool_calls]
    assert first.function.name == "get_weather" and first.function.arguments == '{"city": "Pa'


def _commit_offsets(v: dict[str, object]) -> tuple[int, int] | None:
    """Characters fed (one at a time) when the first call's name event, and then its commit, left the tool feeder."""
    stages = default_stages(v["tool_parser"], v["reasoning_parser"], None, vector_thinking(v.get("request") or {}))
    names = [s.name for s in stages]
    upto = names.index("tools") + 1
    name_at = None
    for fed, ch in enumerate(str(v["text"]), 1):
        items: list[object] = [ch]
        for st in stages[:upto]:
            items = [o for it in items for o in st.feed(it)]
        for e in items:
            if isinstance(e, ToolDelta) and e.call == 0:
                if e.name is not None and name_at is None:
                    name_at = fed
                elif name_at is not None and (e.args or e.end) and not e.abort:
                    return name_at, fed
    return None


@pytest.mark.shared
@pytest.mark.skipif(shared_dir() is None, reason="needs ../shared/corpus (conformance vectors)")
def test_no_invented_empty_arguments_on_any_cut_of_the_corpus() -> None:
    """Cut every corpus call between its name and its first argument: never a call with ``{}`` the model did not write.

    (A cut that completes a literal, such as pythonic ``f(a=1``, is a payload and may be a call, with that argument.)
    """
    checked = 0
    for v in corpus_vectors():
        if not v.get("tool_parser") or not (v.get("expect") or {}).get("tool_calls"):
            continue
        try:
            offsets = _commit_offsets(v)
        except UnknownParserError:  # a peer parser deltaflow does not have (the corpus test lists them)
            continue
        if offsets is None:
            continue
        name_at, commit_at = offsets
        text = str(v["text"])
        for cut in range(name_at, commit_at):
            m = parse_complete(
                text[:cut], tool_parser=v["tool_parser"], reasoning_parser=v["reasoning_parser"],
                enable_thinking=vector_thinking(v.get("request") or {}),
            )
            invented = [c for c in m.tool_calls[:1] if c.function.arguments == "{}"]
            assert not invented, f"{v['id']} cut at {cut}: {text[max(0, cut - 60):cut]!r} gave {invented}"
            checked += 1
    assert checked > 500


@pytest.mark.parametrize(("blanks", "is_call"), [(100, True), (4000, True), (5000, False)])
def test_the_hold_before_the_payload_is_bounded(blanks: int, is_call: bool) -> None:
    """A named call whose payload has not begun within COMMIT_HOLD_MAX characters is no call: it is text, whole."""
    text = "<|tool_call>call:get_weather{" + " " * blanks + "city:<|\"|>Paris<|\"|>}<tool_call|>"
    m = check_chunkings(text, tool_parser="gemma4", seeds=range(2))
    if is_call:
        assert [(c.function.name, c.function.arguments) for c in m.tool_calls] == [("get_weather", '{"city": "Paris"}')]
    else:
        assert m.tool_calls == [] and m.content == text
