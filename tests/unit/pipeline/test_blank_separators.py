"""BlankSeparators: whitespace-only content between a thought or a call and a call (or the end) is dropped;
every other character, and every thought, call, token id and finish reason, goes out unchanged, in order."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltaflow
from deltaflow.messages import DeltaFunctionCall, DeltaMessage, DeltaToolCall
from deltaflow.pipeline.separators import BlankSeparators, drop_blank_separators


def call(index: int, name: str | None = "f", args: str = "{}") -> DeltaMessage:
    return DeltaMessage(tool_calls=[DeltaToolCall(index=index, id=f"c{index}" if name else None,
                                                  type="function" if name else None,
                                                  function=DeltaFunctionCall(name=name, arguments=args))])


def run(deltas: list[DeltaMessage]) -> list[DeltaMessage]:
    f = BlankSeparators()
    out = [d for delta in deltas for d in f.feed(delta)]
    return out + f.finish()


def content(deltas: list[DeltaMessage]) -> str:
    return "".join(d.content or "" for d in deltas)


def test_the_blank_between_a_thought_and_a_call_is_dropped() -> None:
    out = run([DeltaMessage(reasoning_content="think"), DeltaMessage(content="\n"), DeltaMessage(content="\n"),
               call(0), DeltaMessage(finish_reason="tool_calls")])
    assert content(out) == ""
    assert [d.reasoning_content for d in out if d.reasoning_content] == ["think"]
    assert [d.tool_calls[0].function.name for d in out if d.tool_calls] == ["f"]
    assert out[-1].finish_reason == "tool_calls"


def test_blanks_before_text_stay_with_the_text() -> None:
    out = run([DeltaMessage(reasoning_content="t"), DeltaMessage(content="\n\n"), DeltaMessage(content="Hello"),
               DeltaMessage(content="\n\n"), DeltaMessage(content="world\n")])
    assert content(out) == "\n\nHello\n\nworld\n"


def test_blank_between_two_calls_and_at_the_end_is_dropped_but_text_after_a_call_is_kept() -> None:
    out = run([call(0), DeltaMessage(content="\n"), call(1), DeltaMessage(content="\n\n")])
    assert content(out) == "" and len([d for d in out if d.tool_calls]) == 2
    out = run([call(0), DeltaMessage(content="\n\n"), DeltaMessage(content="Done.")])
    assert content(out) == "\n\nDone."


def test_a_blank_before_a_thought_is_kept_and_a_blank_only_response_is_kept() -> None:
    out = run([DeltaMessage(content="\n"), DeltaMessage(reasoning_content="t")])
    assert [(d.content, d.reasoning_content) for d in out] == [("\n", None), (None, "t")]
    assert content(run([DeltaMessage(content=" \n")])) == " \n"


def test_metadata_of_a_dropped_blank_goes_out_on_a_delta_of_its_own() -> None:
    out = run([DeltaMessage(reasoning_content="t"), DeltaMessage(content="\n\n", token_ids=[271]), call(0)])
    assert [d.token_ids for d in out if d.token_ids] == [[271]] and content(out) == ""


# -- every chunking ------------------------------------------------------------------------------

EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("R"), st.sampled_from(["a", "b c"])),
        st.tuples(st.just("C"), st.sampled_from(["\n", "\n\n", " ", "Hi", "x\n", "\t"])),
        st.tuples(st.just("T"), st.just("")),
    ),
    max_size=12,
)


def reference(events: list[tuple[str, str]]) -> tuple[str, list[str]]:
    """Content runs between boundaries: a run of only whitespace followed by a call or the end is dropped,
    unless the response has nothing but it."""
    runs: list[list[str]] = [[]]
    kinds: list[str] = []
    for kind, text in events:
        if kind == "C":
            runs[-1].append(text)
        else:
            kinds.append(kind)
            runs.append([])
    out = []
    visible = any(k != "C" for k, _ in events) or any(not t.isspace() for k, t in events if k == "C")
    for i, run_ in enumerate(runs):
        text = "".join(run_)
        followed_by = kinds[i] if i < len(kinds) else "end"
        if text and text.isspace() and followed_by in ("T", "end") and visible:
            continue
        out.append(text)
    return "".join(out), kinds


@given(EVENTS, st.data())
def test_on_every_chunking_only_separators_are_dropped(events: list[tuple[str, str]], data: Any) -> None:
    deltas: list[DeltaMessage] = []
    calls = 0
    for kind, text in events:
        if kind == "R":
            deltas.append(DeltaMessage(reasoning_content=text))
        elif kind == "T":
            deltas.append(call(calls))
            calls += 1
        else:  # content, split anywhere
            cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=2)))
            pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
            deltas.extend(DeltaMessage(content=p) for p in pieces if p)
    out = run(deltas)
    want_content, kinds = reference(events)
    assert content(out) == want_content
    assert "".join(d.reasoning_content or "" for d in out) == "".join(t for k, t in events if k == "R")
    assert [tc.index for d in out for tc in d.tool_calls] == list(range(calls))
    order = [("R" if d.reasoning_content else "T" if d.tool_calls else "C") for d in out]
    assert [k for k in order if k != "C"] == [k for k in kinds if k != "C"]
    assert all(d.content or d.reasoning_content or d.tool_calls for d in out)  # no empty deltas


# -- through deltaflow.stream ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("chunk", [1, 3, 1000])
async def test_a_qwen3_call_turn_streams_without_a_blank_text(chunk: int) -> None:
    text = "<think>\nI call it.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"

    async def source() -> Any:
        for i in range(0, len(text), chunk):
            yield text[i : i + chunk]

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    async with deltaflow.stream(source(), tool_parser="hermes", reasoning_parser="qwen3", tools=tools) as raw:
        deltas = drop_blank_separators(raw)
        got = [d async for d in deltas]
    assert content(got) == ""
    assert "".join(d.reasoning_content or "" for d in got).strip() == "I call it."
    assert "".join(tc.function.arguments or "" for d in got for tc in d.tool_calls).replace(" ", "") == '{"x":1}'
    assert deltas.usage is raw.usage and deltas.stream_id == raw.stream_id


@pytest.mark.anyio
async def test_receive_ends_with_end_of_stream() -> None:
    async def source() -> Any:
        yield "Hi"

    async with deltaflow.stream(source()) as raw:
        deltas = drop_blank_separators(raw)
        assert (await deltas.receive()).content == "Hi"
        with pytest.raises(anyio.EndOfStream):
            while True:
                await deltas.receive()


# -- the server's choice -------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["drop", "keep"])
def test_the_server_drops_blank_separators_unless_told_to_keep_them(policy: str) -> None:
    """``create_app(blank_separators=...)``: a Qwen3 call turn's Chat message has no content by default,
    and the parser's ``"\\n\\n"`` with ``"keep"``; an unknown policy is refused, naming the choices."""
    import httpx

    from deltaflow.server import create_app

    text = "<think>\nI call it.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"

    async def engine(request: Any) -> Any:
        yield deltaflow.TokenChunk(text=text, finish_reason="stop")

    app = create_app(engine, tool_parser="hermes", reasoning_parser="qwen3", model="m", blank_separators=policy)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}

    async def ask() -> Any:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return (await client.post("/v1/chat/completions", json=body)).json()

    message = anyio.run(ask)["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "f"
    assert message["content"] == ("\n\n" if policy == "keep" else None)
    with pytest.raises(ValueError, match="blank_separators must be 'drop' or 'keep'"):
        create_app(engine, blank_separators="strip")
