"""TokenReasoning: has reasoning ended in the current turn, and which ids are content, from token ids alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deltaflow import UnknownParserError
from deltaflow.parsers import TokenReasoning
from deltaflow.testing import load_tokenizer

# Abstract GLM-style ids (the cases).
THINK_S, THINK_E, TOOL_S, TOOL_E, OBSERVATION, ASSISTANT, USER, TEXT = 1, 2, 3, 4, 5, 6, 7, 8


def glm(**kwargs: Any) -> TokenReasoning:
    """A GLM-4.7-like state: </think> ends reasoning, <tool_call> ends it implicitly, three turn markers."""
    return TokenReasoning(THINK_E, implicit_end_ids=[TOOL_S], turn_ids=[OBSERVATION, ASSISTANT, USER], **kwargs)


@dataclass(frozen=True)
class Case:
    """Ids, the content ids expected, and whether reasoning has ended."""

    name: str
    ids: list[int]
    content: list[int]
    ended: bool


IDS_2 = [THINK_E, 20, TOOL_S, 30, TOOL_E, 21, TOOL_S, 31, TOOL_E]
IDS_4 = [TOOL_S, 30, TOOL_E, OBSERVATION, TEXT, ASSISTANT, THINK_S, TEXT]
REQUIRED = [
    Case("explicit end", [THINK_S, TEXT, THINK_E, 20, 21, TOOL_S, 30, TOOL_E], [20, 21, TOOL_S, 30, TOOL_E], True),
    Case("end first, calls after", IDS_2, IDS_2[1:], True),
    Case("implicit end at a tool call", [THINK_S, TEXT, TOOL_S, 30, TOOL_E], [TOOL_S, 30, TOOL_E], True),
    Case("earlier turn's call, new turn still reasoning", IDS_4, IDS_4, False),
    Case("no markers", [TEXT, 20, 21], [TEXT, 20, 21], False),
    Case("empty", [], [], False),
]


@pytest.mark.parametrize("case", REQUIRED, ids=lambda c: c.name)
def test_required_glm_style_cases(case: Case) -> None:
    """The issue's required cases: content ids and the reasoning-ended flag."""
    state = glm()
    assert state.extract_content_ids(case.ids) == case.content
    assert state.is_reasoning_end(case.ids) is case.ended


def test_the_first_terminator_wins() -> None:
    """After the turn start, the first terminator decides: an implicit one before </think> starts the content there."""
    state = glm()
    ids = [THINK_S, TEXT, TOOL_S, 30, TOOL_E, THINK_E, 40]
    assert state.extract_content_ids(ids) == [TOOL_S, 30, TOOL_E, THINK_E, 40]


MARKERS_OF_EARLIER_TURNS = [
    Case(
        "closed reasoning then a user turn",
        [THINK_S, TEXT, THINK_E, 20, USER, TEXT, ASSISTANT, THINK_S, TEXT],
        [THINK_S, TEXT, THINK_E, 20, USER, TEXT, ASSISTANT, THINK_S, TEXT],
        False,
    ),
    Case(
        "a call then an observation",
        [THINK_E, 20, TOOL_S, 30, TOOL_E, OBSERVATION, TEXT, ASSISTANT, TEXT],
        [THINK_E, 20, TOOL_S, 30, TOOL_E, OBSERVATION, TEXT, ASSISTANT, TEXT],
        False,
    ),
    Case("new turn ends too", [THINK_E, 20, USER, TEXT, ASSISTANT, TEXT, THINK_E, 50], [50], True),
    Case("turn marker last", [THINK_S, TEXT, THINK_E, 20, ASSISTANT], [THINK_S, TEXT, THINK_E, 20, ASSISTANT], False),
]


@pytest.mark.parametrize("case", MARKERS_OF_EARLIER_TURNS, ids=lambda c: c.name)
def test_markers_from_earlier_turns_do_not_count(case: Case) -> None:
    """Only terminators after the last turn-boundary token count."""
    state = glm()
    assert state.extract_content_ids(case.ids) == case.content
    assert state.is_reasoning_end(case.ids) is case.ended


@pytest.mark.parametrize("case", REQUIRED + MARKERS_OF_EARLIER_TURNS, ids=lambda c: c.name)
@pytest.mark.parametrize(
    "make", [lambda: glm(enabled=False), lambda: glm(starts_open=False)], ids=["thinking-disabled", "not-open"]
)
def test_no_reasoning_to_end_leaves_ids_unchanged(case: Case, make: Any) -> None:
    """With thinking disabled (or a dialect that does not start open) ids are unchanged and reasoning counts as ended."""
    state = make()
    assert state.extract_content_ids(case.ids) == case.ids
    assert state.is_reasoning_end(case.ids) is True


def test_extract_returns_a_new_list_and_accepts_any_sequence() -> None:
    """The result is a fresh list; tuples work as input."""
    ids = [THINK_S, TEXT, THINK_E, 20]
    out = glm().extract_content_ids(ids)
    out.append(99)
    assert ids == [THINK_S, TEXT, THINK_E, 20]
    assert glm().extract_content_ids(tuple(ids)) == [20]
    unchanged = glm().extract_content_ids(ids[:2])
    assert unchanged == ids[:2] and unchanged is not ids


def test_without_an_implicit_terminator_a_tool_call_does_not_end_reasoning() -> None:
    """A dialect that declares no implicit end keeps reasoning open across a tool call."""
    state = TokenReasoning(THINK_E, turn_ids=[USER])
    assert state.is_reasoning_end([THINK_S, TEXT, TOOL_S, 30, TOOL_E]) is False


def chatml(*turns: tuple[str, str]) -> str:
    return "".join(f"<|im_start|>{role}\n{body}<|im_end|>\n" for role, body in turns)


def test_for_dialect_qwen3_on_a_rendered_multi_turn_conversation(shared: Path) -> None:
    """On a real Qwen3 ChatML conversation, an earlier turn's </think> does not count; the current turn's does."""
    tok = load_tokenizer("qwen3")
    state = TokenReasoning.for_dialect("qwen3", tok)
    history = chatml(
        ("system", "You are helpful."),
        ("user", "天気は？"),
        ("assistant", "<think>\nThe user asks about weather.\n</think>\n\n晴れです。"),
        ("user", "And tomorrow?"),
    )
    prompt = history + "<|im_start|>assistant\n"
    thinking = prompt + "<think>\nTomorrow… let me think 🌧"

    def enc(s: str) -> list[int]:
        return list(tok.encode(s, add_special_tokens=False).ids)

    end_id = tok.token_to_id("</think>")
    assert enc(history).count(end_id) == 1, "precondition: an earlier turn closed its reasoning"
    assert state.is_reasoning_end(enc(prompt)) is False
    assert state.is_reasoning_end(enc(thinking)) is False
    assert state.extract_content_ids(enc(thinking)) == enc(thinking)
    done = enc(thinking + "\n</think>") + enc("\n\nRain, probably. ")
    assert state.is_reasoning_end(done) is True
    assert state.extract_content_ids(done) == enc("\n\nRain, probably. ")
    # The answer ends its turn: a new turn starts with nothing ended.
    after = done + enc("<|im_end|>\n" + chatml(("user", "Thanks")) + "<|im_start|>assistant\n")
    assert state.is_reasoning_end(after) is False
    # Thinking disabled for the request: nothing to wait for.
    off = TokenReasoning.for_dialect("qwen3", tok, enable_thinking=False)
    assert off.is_reasoning_end(enc(thinking)) is True
    assert off.extract_content_ids(enc(thinking)) == enc(thinking)


def test_for_dialect_deepseek_r1_on_deepseek_v31(shared: Path) -> None:
    """DeepSeek-V3.1's single-token </think> and its turn markers work with the deepseek_r1 dialect."""
    tok = load_tokenizer("deepseek-v3.1")
    state = TokenReasoning.for_dialect("deepseek_r1", tok)

    def enc(s: str) -> list[int]:
        return list(tok.encode(s, add_special_tokens=False).ids)

    prev = "<｜User｜>1+1?<｜Assistant｜><think>easy</think>2<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜><think>\nhmm"
    assert state.is_reasoning_end(enc(prev)) is False
    ids = enc(prev + "</think>") + enc("4")
    assert state.extract_content_ids(ids) == enc("4")


@pytest.mark.parametrize(
    ("dialect", "family"), [("qwen3", "qwen2.5"), ("qwen3", "llama3"), ("deepseek_r1", "deepseek-v3")]
)
def test_for_dialect_needs_a_single_token_end_marker(shared: Path, dialect: str, family: str) -> None:
    """A tokenizer that splits </think> into several tokens cannot give token-level state: ValueError naming the marker."""
    tok = load_tokenizer(family)
    assert len(tok.encode("</think>", add_special_tokens=False).ids) > 1
    with pytest.raises(ValueError, match="</think>"):
        TokenReasoning.for_dialect(dialect, tok)


def test_for_dialect_unknown_parser(shared: Path) -> None:
    """An unregistered reasoning parser is an UnknownParserError."""
    with pytest.raises(UnknownParserError):
        TokenReasoning.for_dialect("nope", load_tokenizer("qwen3"))


def test_for_dialect_rejects_an_unsupported_tokenizer() -> None:
    """An object that is no tokenizer is a TypeError."""
    with pytest.raises(TypeError, match="unsupported tokenizer"):
        TokenReasoning.for_dialect("qwen3", object())


def _cl100k_with(shared: Path, special: dict[str, int]) -> Any:
    """cl100k ranks (offline) with the given special tokens (the tokenizers README's surrogate recipe)."""
    import json
    import os

    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    meta = json.loads((shared / "tokenizers" / "gpt-oss" / "o200k_harmony.json").read_text(encoding="utf-8"))
    ranks = load_tiktoken_bpe(
        os.fspath(shared / "tokenizers" / "cl100k" / "cl100k_base.tiktoken"),
        expected_hash="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    )
    return tiktoken.Encoding("surrogate", pat_str=meta["pat_str"], mergeable_ranks=ranks, special_tokens=special)


def test_for_dialect_with_a_tiktoken_encoding(shared: Path) -> None:
    """A tiktoken encoding whose </think> and turn markers are special tokens works; one without </think> is refused."""
    special = {"<|im_start|>": 100264, "<|im_end|>": 100265, "<think>": 100300, "</think>": 100301}
    enc = _cl100k_with(shared, special)
    state = TokenReasoning.for_dialect("qwen3", enc)
    ids = enc.encode(
        "<|im_start|>assistant\n<think>a</think>b<|im_end|>\n<|im_start|>assistant\n<think>\nc", allowed_special="all"
    )
    assert state.is_reasoning_end(ids) is False
    more = ids + enc.encode("</think>", allowed_special="all") + enc.encode("Done")
    assert state.extract_content_ids(more) == enc.encode("Done")
    with pytest.raises(ValueError, match="</think>"):
        TokenReasoning.for_dialect("qwen3", _cl100k_with(shared, {"<|im_end|>": 100265}))
