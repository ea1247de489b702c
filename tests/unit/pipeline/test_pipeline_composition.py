"""Pipeline composition: the default chain per dialect, and insert/replace/remove/append by stage name."""

from __future__ import annotations

from typing import Any

import pytest

from deltaflow import Pipeline, StageError, StateError, TokenChunk, UnknownParserError
from deltaflow.pipeline import SyncChain
from deltaflow.pipeline.sources import to_chunk
from deltaflow.stages import DeltaAssembler, ReasoningSplitter

FULL = ["detokenize", "router", "reasoning", "tools", "identity", "name_filter", "assembler"]


class Tap:
    """A user sync stage that forwards every item."""

    name = "tap"

    def feed(self, item: object) -> list[object]:
        return [item]

    def finish(self) -> list[object]:
        return []


def test_for_model_builds_the_seven_stage_default_chain() -> None:
    """With a tool parser the default chain has the seven stages of the design, in order."""
    assert Pipeline.for_model(tool_parser="hermes", reasoning_parser="qwen3").names == FULL


def test_without_a_tool_parser_the_tool_stages_are_left_out() -> None:
    """Without a tool parser the tool block feeder, identity buffer and name filter are not in the chain."""
    assert Pipeline.for_model(reasoning_parser="qwen3").names == ["detokenize", "router", "reasoning", "assembler"]


def test_for_model_validates_its_arguments_once() -> None:
    """Unknown parser names and bad chunking fail when the pipeline is built, not per stream."""
    with pytest.raises(UnknownParserError):
        Pipeline.for_model(tool_parser="nope")
    with pytest.raises(UnknownParserError):
        Pipeline.for_model(reasoning_parser="nope")
    with pytest.raises(ValueError, match="chunking"):
        Pipeline.for_model(chunking="words")


def test_insert_before_after_append_replace_remove() -> None:
    """Each composition method edits the chain by name and returns the pipeline."""
    p = Pipeline.for_model(tool_parser="hermes", reasoning_parser="qwen3")
    assert p.insert_before("router", "a", Tap) is p
    assert p.insert_after("name_filter", "b", Tap) is p
    assert p.append("c", Tap) is p
    assert p.names == ["detokenize", "a", "router", "reasoning", "tools", "identity", "name_filter", "b", "assembler", "c"]
    assert p.replace("reasoning", lambda: ReasoningSplitter(None)) is p
    assert p.names[3] == "reasoning"
    assert p.remove("a").remove("c") is p
    assert p.names == ["detokenize", "router", "reasoning", "tools", "identity", "name_filter", "b", "assembler"]


def test_build_makes_fresh_named_instances() -> None:
    """build() calls every factory: fresh instances each time, named as in the pipeline."""
    p = Pipeline.for_model(tool_parser="hermes").insert_after("router", "my_tap", Tap)
    first, second = p.build(), p.build()
    assert [s.name for s in first] == p.names
    assert all(a is not b for a, b in zip(first, second, strict=True))
    assert isinstance(first[-1], DeltaAssembler)


@pytest.mark.parametrize("method", ["insert_before", "insert_after", "replace", "remove"])
def test_an_unknown_stage_name_is_a_key_error_listing_the_stages(method: str) -> None:
    """Naming a stage that is not there raises KeyError that lists the stages."""
    p = Pipeline.for_model(tool_parser="hermes")
    args: tuple[Any, ...] = (
        ("nope",) if method == "remove" else ("nope", Tap) if method == "replace" else ("nope", "x", Tap)
    )
    with pytest.raises(KeyError) as info:
        getattr(p, method)(*args)
    msg = str(info.value)
    assert "'nope'" in msg
    for name in p.names:
        assert name in msg
    assert "x" not in p.names


@pytest.mark.parametrize("method", ["insert_before", "insert_after", "append"])
def test_a_duplicate_stage_name_is_a_value_error(method: str) -> None:
    """Adding a stage under a name already present raises ValueError naming it, and leaves the chain as it was."""
    p = Pipeline.for_model(tool_parser="hermes")
    before = p.names
    args: tuple[Any, ...] = ("router", Tap) if method == "append" else ("assembler", "router", Tap)
    with pytest.raises(ValueError, match="'router' is already in the pipeline"):
        getattr(p, method)(*args)
    assert p.names == before


@pytest.mark.parametrize("name", ["", None, 3])
def test_a_stage_name_must_be_a_non_empty_str(name: Any) -> None:
    """Stage names are non-empty strings."""
    with pytest.raises(ValueError, match="non-empty str"):
        Pipeline().append(name, Tap)


def test_a_factory_must_be_callable() -> None:
    """A stage is added as a factory (a callable), not as an instance."""
    with pytest.raises(TypeError, match="must be callable"):
        Pipeline().append("tap", Tap())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options", [{"buffer_size": -1}, {"prefetch": -1}, {"max_batch": 0}], ids=["buffer", "prefetch", "batch"]
)
def test_runtime_options_are_validated(options: dict[str, Any]) -> None:
    """Negative buffers or a batch below 1 are refused."""
    with pytest.raises(ValueError, match="must be"):
        Pipeline(**options)


def test_sync_chain_names_the_stage_that_raised_and_then_refuses_input() -> None:
    """SyncChain wraps a stage's exception in StageError naming it, and accepts nothing afterwards."""

    class Bad(Tap):
        name = "bad"

        def feed(self, item: object) -> list[object]:
            raise ArithmeticError("no")

    chain = SyncChain([Tap(), Bad()])
    with pytest.raises(StageError) as info:
        chain.run(["x"])
    assert info.value.stage == "bad"
    assert isinstance(info.value.__cause__, ArithmeticError)
    with pytest.raises(StateError):
        chain.run(["y"])


@pytest.mark.parametrize(
    ("item", "chunk"),
    [
        ("hi", TokenChunk(text="hi")),
        (7, TokenChunk(token_ids=[7])),
        ([1, 2], TokenChunk(token_ids=[1, 2])),
        ((1, 2), TokenChunk(token_ids=[1, 2])),
        ([], TokenChunk(token_ids=[])),
        (TokenChunk(token_ids=[3], finish_reason="stop"), TokenChunk(token_ids=[3], finish_reason="stop")),
    ],
    ids=["str", "int", "list", "tuple", "empty-list", "TokenChunk"],
)
def test_source_items_are_normalized_to_token_chunks(item: object, chunk: TokenChunk) -> None:
    """Each accepted source item kind becomes a TokenChunk."""
    assert to_chunk(item) == chunk


@pytest.mark.parametrize("item", [1.0, True, None, b"x", [1, "2"], [[1]], {"a": 1}], ids=repr)
def test_other_source_items_are_refused_with_the_accepted_kinds(item: object) -> None:
    """Anything else is a TypeError that lists what is accepted and names what was given."""
    with pytest.raises(TypeError, match="str, an int token id, a list of int token ids or a TokenChunk") as info:
        to_chunk(item)
    assert type(item).__name__ in str(info.value)


@pytest.mark.anyio
@pytest.mark.parametrize("coalesce", [False, True])
async def test_an_open_stream_does_not_keep_its_pipeline_alive(coalesce: bool) -> None:
    """Once a stream is open, its pipeline (stage factories and the tools they close over) can be freed;
    the stream still runs to its end."""
    import gc
    import weakref

    import anyio

    gate = anyio.Event()

    async def source() -> Any:
        yield "Hello"
        await gate.wait()
        yield " world"

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    pipe = Pipeline.for_model(tool_parser="hermes", tools=tools, prefetch=0, coalesce=coalesce)
    ref = weakref.ref(pipe)
    async with pipe.open(source()) as deltas:
        del pipe
        gc.collect()
        assert ref() is None
        gate.set()
        text = "".join([d.content or "" async for d in deltas])
    assert text == "Hello world"
