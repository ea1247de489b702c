"""Peer conformance: run the shared corpus vectors of the dialects deltaflow implements.

The vectors live in ``../shared/corpus/<peer>.jsonl`` (vLLM, SGLang, LMDeploy,
llama.cpp) and are read at run time; nothing is copied into the project. A
vector is in scope when its ``tool_parser`` and ``reasoning_parser`` are each
registered in :mod:`deltaflow.parsers.registry` (or null), and not both null,
so a dialect registered later is picked up without editing this file.

Each vector is parsed twice, with ``parse_complete`` and streamed (the
vector's ``chunks`` when given, else one character per chunk); the two must
agree exactly (deltaflow's own guarantee), and each must meet the peer's
expectation, compared the way the peer's test compares it:

- a key present in ``expect`` is asserted, an absent key is not, and keys the
  vector lists in ``unasserted`` (values recorded from the peer parser that its
  test does not check) are not asserted either;
- ``content`` / ``reasoning_content``: ``None`` and ``""`` are equal; for
  llama.cpp vectors both sides are compared after ``str.strip()`` (llama.cpp's
  test trims);
- ``tool_calls``: same count and order; per call, ``name`` when given, and
  ``arguments`` (a decoded object) equal to ``json.loads`` of our arguments
  string when given;
- ``content_contains`` / ``content_not_contains``: substring checks on content.

Request fields used: ``tools``, ``enable_thinking`` (or
``chat_template_kwargs.enable_thinking``), and SGLang's ``force_reasoning``
(default False), passed as ``reasoning_starts_open``. Ignored request fields:
``reasoning_format``, ``parallel_tool_calls``, ``tool_choice``,
``is_partial``. Ignored expectations:
``is_reasoning_end`` (a token-id check), ``last_tool_call``,
``streaming_content``, and per call ``id`` and ``arguments_raw`` (call ids are
ours; argument text is the model's own source text, compared as JSON); a
vector's ``mode`` is ignored too, since both paths are always run.

Cases where deltaflow deliberately differs from the peer are listed in the
table of ``CONFORMANCE.md``; for those the test asserts the opposite (the
case still does not match), so the list cannot go stale. Run
``pytest tests/corpus -rP -k summary`` to see the counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from deltaflow import ChatMessage, accumulate, parse_complete
from deltaflow.parsers import registry
from deltaflow.testing import corpus_vectors, feed_chunks, message_key, vector_thinking

PEERS: tuple[str, ...] = ("vllm", "sglang", "lmdeploy", "llamacpp")
"""The corpus files, one per peer project."""

TRIMMING_PEERS: frozenset[str] = frozenset({"llamacpp"})
"""Peers whose tests compare content and reasoning after trimming whitespace."""

SGLANG_UNFORCED: frozenset[str] = frozenset({"qwen3", "glm45"})
"""Reasoning parsers whose SGLang detector defaults to ``force_reasoning=False``."""

CONFORMANCE_MD: Path = Path(__file__).resolve().parents[2] / "CONFORMANCE.md"

_ROW_ID = re.compile(r"^\|\s*`([^`]+)`\s*\|")
_CELL_SEP = re.compile(r"(?<!\\)\|")
TABLE_HEADER: tuple[str, ...] = ("case", "peer expects", "deltaflow gives", "why")


def in_scope_tool_parsers() -> frozenset[str | None]:
    """The tool parser names a vector may use: every registered one, or none."""
    return frozenset({*registry.tool_dialect_names(), None})


def in_scope_reasoning_parsers() -> frozenset[str | None]:
    """The reasoning parser names a vector may use: every registered one, or none."""
    return frozenset({*registry.reasoning_dialect_names(), None})


@dataclass(frozen=True)
class ParseArgs:
    """The parser configuration a vector asks for."""

    tool_parser: str | None
    reasoning_parser: str | None
    tools: list[dict[str, Any]] | None
    enable_thinking: bool | None
    reasoning_starts_open: bool | None = None

    def as_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``parse_complete`` / ``ResponseParser``."""
        return {
            "tool_parser": self.tool_parser,
            "reasoning_parser": self.reasoning_parser,
            "tools": self.tools,
            "enable_thinking": self.enable_thinking,
            "reasoning_starts_open": self.reasoning_starts_open,
        }


@dataclass(frozen=True)
class Vector:
    """One in-scope corpus vector, with what this test needs of it."""

    id: str
    peer: str
    text: str
    chunks: tuple[str, ...]
    args: ParseArgs
    expect: Mapping[str, Any]
    unasserted: frozenset[str]

    @classmethod
    def from_raw(cls, peer: str, raw: Mapping[str, Any]) -> Vector:
        """Build a vector from its JSON object in ``<peer>.jsonl``."""
        request = raw.get("request") or {}
        thinking = vector_thinking(request)
        text = raw["text"]
        chunks = raw.get("chunks")
        return cls(
            id=raw["id"],
            peer=peer,
            text=text,
            chunks=tuple(chunks) if chunks is not None else (tuple(text) or ("",)),
            args=ParseArgs(
                tool_parser=raw.get("tool_parser"),
                reasoning_parser=raw.get("reasoning_parser"),
                tools=request.get("tools"),
                enable_thinking=thinking,
                reasoning_starts_open=_starts_open(peer, raw.get("reasoning_parser"), request),
            ),
            expect=raw["expect"],
            unasserted=frozenset(raw.get("unasserted") or ()),
        )


def _starts_open(peer: str, raw_reasoning: str | None, request: Mapping[str, Any]) -> bool | None:
    """The ``reasoning_starts_open`` a vector's request asks for (None: the dialect's default).

    SGLang's reasoning parsers take ``force_reasoning``: when it is False the
    prompt did not open the reasoning block, so reasoning starts only at a
    ``<think>`` the model writes. Its default depends on the detector: False
    for the one SGLang uses for ``qwen3`` and ``glm45``, True for
    ``deepseek_r1`` (the dialect's default here too). The other peers'
    vectors carry no such field and use the dialect's default.
    """
    if peer != "sglang":
        return None
    forced = request.get("force_reasoning")
    if forced is None and raw_reasoning in SGLANG_UNFORCED:
        return False
    return forced if isinstance(forced, bool) else None


@dataclass(frozen=True)
class Deviation:
    """One row of the deviation table in CONFORMANCE.md."""

    id: str
    cells: tuple[str, ...]

    @property
    def why(self) -> str:
        """The row's last cell: the reason for the deviation."""
        return self.cells[-1]


@dataclass(frozen=True)
class Outcome:
    """What deltaflow gives for a vector, whole and streamed, and how it compares with the peer."""

    complete: ChatMessage
    streamed: ChatMessage
    complete_mismatches: tuple[str, ...]
    streamed_mismatches: tuple[str, ...]

    @property
    def stream_equals_complete(self) -> bool:
        """The streamed deltas rebuild exactly what ``parse_complete`` returns."""
        return message_key(self.streamed) == message_key(self.complete)

    @property
    def matches(self) -> bool:
        """Both paths meet the peer's expectation."""
        return not self.complete_mismatches and not self.streamed_mismatches


def _in_scope(raw: Mapping[str, Any]) -> bool:
    """Whether deltaflow implements the vector's dialects (and it names at least one)."""
    tp, rp = raw.get("tool_parser"), raw.get("reasoning_parser")
    if tp is None and rp is None:
        return False
    return tp in in_scope_tool_parsers() and rp in in_scope_reasoning_parsers()


@lru_cache(maxsize=1)
def in_scope_vectors() -> tuple[Vector, ...]:
    """The in-scope vectors of every peer file, in file order (empty when ../shared is absent)."""
    out: list[Vector] = []
    for peer in PEERS:
        out.extend(Vector.from_raw(peer, raw) for raw in corpus_vectors([peer]) if _in_scope(raw))
    return tuple(out)


@lru_cache(maxsize=1)
def deviations() -> dict[str, Deviation]:
    """The deviation table of CONFORMANCE.md: rows whose first cell is a backticked case id."""
    found: dict[str, Deviation] = {}
    for line in CONFORMANCE_MD.read_text(encoding="utf-8").splitlines():
        m = _ROW_ID.match(line.strip())
        if m is None:
            continue
        case_id = m.group(1)
        if case_id in found:
            raise ValueError(f"CONFORMANCE.md lists {case_id!r} twice")
        found[case_id] = Deviation(id=case_id, cells=_cells(line))
    return found


def _cells(line: str) -> tuple[str, ...]:
    """The cells of one markdown table row (a pipe escaped as ``\\|`` stays inside its cell)."""
    row = line.strip().removeprefix("|")
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return tuple(c.strip() for c in _CELL_SEP.split(row))


def _text_field(value: str | None, trim: bool) -> str | None:
    """Normalize a content or reasoning value for comparison: ``""`` is ``None``, trimmed if asked."""
    if value is not None and trim:
        value = value.strip()
    return value or None


def _compare(vector: Vector, got: ChatMessage) -> Iterator[str]:
    """Yield one line per way ``got`` differs from the vector's expectation."""
    expect = vector.expect
    trim = vector.peer in TRIMMING_PEERS
    for field in ("content", "reasoning_content"):
        if field in expect and field not in vector.unasserted:
            want = _text_field(expect[field], trim)
            have = _text_field(getattr(got, field), trim)
            if want != have:
                yield f"{field}: expected {want!r}, got {have!r}"
    content = got.content or ""
    for needle in expect.get("content_contains") or ():
        if needle not in content:
            yield f"content: expected to contain {needle!r}, got {got.content!r}"
    for needle in expect.get("content_not_contains") or ():
        if needle in content:
            yield f"content: expected not to contain {needle!r}, got {got.content!r}"
    if "tool_calls" in expect and "tool_calls" not in vector.unasserted:
        yield from _compare_calls(expect["tool_calls"], got)


def _compare_calls(want: list[Mapping[str, Any]], got: ChatMessage) -> Iterator[str]:
    """Yield one line per way ``got``'s tool calls differ from the expected ones."""
    have = [(c.function.name, c.function.arguments) for c in got.tool_calls]
    if len(want) != len(have):
        yield f"tool_calls: expected {len(want)} call(s), got {len(have)}: {have!r}"
        return
    for i, (w, (name, arguments)) in enumerate(zip(want, have, strict=True)):
        if "name" in w and w["name"] != name:
            yield f"tool_calls[{i}].name: expected {w['name']!r}, got {name!r}"
        if "arguments" in w:
            try:
                decoded = json.loads(arguments)
            except ValueError:
                yield f"tool_calls[{i}].arguments: expected {w['arguments']!r}, got invalid JSON {arguments!r}"
                continue
            if decoded != w["arguments"]:
                yield f"tool_calls[{i}].arguments: expected {w['arguments']!r}, got {arguments!r}"


def run_vector(vector: Vector) -> Outcome:
    """Parse the vector whole and streamed, and compare both with the peer's expectation."""
    kwargs = vector.args.as_kwargs()
    complete = parse_complete(vector.text, **kwargs)
    streamed = accumulate(feed_chunks(vector.chunks, **kwargs))
    return Outcome(
        complete=complete,
        streamed=streamed,
        complete_mismatches=tuple(_compare(vector, complete)),
        streamed_mismatches=tuple(_compare(vector, streamed)),
    )


def _params() -> list[Any]:
    """One parameter per in-scope vector, or a placeholder that the ``shared`` fixture skips."""
    vectors = in_scope_vectors()
    if not vectors:
        return [pytest.param(None, id="no-corpus")]
    return [pytest.param(v, id=v.id) for v in vectors]


@pytest.mark.shared
@pytest.mark.parametrize("vector", _params())
def test_vector(vector: Vector | None, shared: Path) -> None:
    """The vector meets the peer's expectation, or, when listed in CONFORMANCE.md, still deliberately does not."""
    assert vector is not None
    assert "".join(vector.chunks) == vector.text, f"corpus slip: the chunks of {vector.id} do not join to its text"
    outcome = run_vector(vector)
    assert outcome.stream_equals_complete, (
        f"stream != complete for {vector.id}:\n"
        f"  streamed: {message_key(outcome.streamed)!r}\n  complete: {message_key(outcome.complete)!r}"
    )
    deviation = deviations().get(vector.id)
    if deviation is None:
        problems = [f"complete: {p}" for p in outcome.complete_mismatches]
        problems += [f"streamed: {p}" for p in outcome.streamed_mismatches]
        assert not problems, f"{vector.id} differs from {vector.peer}:\n  " + "\n  ".join(problems)
    else:
        assert not outcome.matches, (
            f"{vector.id} now matches {vector.peer}'s expectation: remove it from CONFORMANCE.md"
            f" (listed because: {deviation.why})"
        )


@pytest.mark.shared
def test_conformance_table_lists_only_in_scope_ids(shared: Path) -> None:
    """Every case id in the CONFORMANCE.md deviation table is an in-scope corpus vector."""
    known = {v.id for v in in_scope_vectors()}
    unknown = sorted(set(deviations()) - known)
    assert not unknown, f"CONFORMANCE.md lists ids that are not in-scope corpus vectors: {unknown}"


def test_conformance_table_is_well_formed() -> None:
    """CONFORMANCE.md has the deviation table header, and every listed case fills all four columns."""
    lines = CONFORMANCE_MD.read_text(encoding="utf-8").splitlines()
    assert any(_cells(line) == TABLE_HEADER for line in lines if line.startswith("|")), (
        f"CONFORMANCE.md lacks the table header | {' | '.join(TABLE_HEADER)} |"
    )
    bad = [d.id for d in deviations().values() if len(d.cells) != len(TABLE_HEADER) or not all(d.cells)]
    assert not bad, f"CONFORMANCE.md rows without exactly {len(TABLE_HEADER)} filled cells: {bad}"


@pytest.mark.shared
def test_corpus_summary(shared: Path) -> None:
    """Every in-scope vector matches its peer or is a listed, still-deviating case; prints the counts."""
    vectors = in_scope_vectors()
    listed = deviations()
    outcomes = [(v.id in listed, run_vector(v).matches) for v in vectors]
    matching = sum(1 for is_listed, matches in outcomes if not is_listed and matches)
    deviating = sum(1 for is_listed, matches in outcomes if is_listed and not matches)
    print(f"corpus: {len(vectors)} in scope, {matching} matching, {deviating} listed deviations")
    assert matching + deviating == len(vectors), (
        f"{len(vectors) - matching - deviating} in-scope vector(s) neither match their peer"
        " nor are a still-deviating case of CONFORMANCE.md (see test_vector)"
    )
