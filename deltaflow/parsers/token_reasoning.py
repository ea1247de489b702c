"""Token-level reasoning state: has reasoning ended, and where does the content start?

For engines that must know, from token ids alone, when reasoning ended
(for example to switch on a structured-output constraint after it).

Rule: find the start of the current turn by scanning back to the last
turn-boundary token; after it, the FIRST terminator ends reasoning: the
explicit end marker (content starts after it) or, for dialects that declare
one, an implicit terminator (content starts at it, e.g. GLM-4.7's
``<tool_call>`` when no ``</think>`` came). Markers of earlier turns never
count. An implicit terminator that is not one token of the tokenizer
(qwen3's ``<tool_call>\n<function=``) is not tracked on token ids. A dialect whose reasoning does not
start open, or a request with thinking disabled, has no reasoning to end: ``is_reasoning_end`` is True and
the ids are returned unchanged.

Only the markers are read: a dialect's start labels, content wrapper and
newline stripping are text conventions of the splitter, so the content ids
begin right after the end marker (a wrapper opener such as ERNIE's
``<response>`` included). Reentrant dialects (Gemma 4) do not start open,
so their blocks are not tracked on token ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from . import registry

__all__ = ("TokenReasoning",)


def _single_id(tokenizer: Any, text: str) -> int | None:
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if hasattr(backend, "token_to_id"):
        tid = backend.token_to_id(text)
        return int(tid) if tid is not None else None
    if hasattr(tokenizer, "encode_single_token"):
        try:
            return int(tokenizer.encode_single_token(text))
        except KeyError:
            return None
    raise TypeError(f"unsupported tokenizer {type(tokenizer).__name__}")


class TokenReasoning:
    """Reasoning state on token ids (see the module docstring).

    Args:
        end_id: the explicit end marker's id.
        turn_ids: ids of turn-boundary tokens.
        implicit_end_ids: ids that end reasoning when no end marker came first.
        starts_open: the output starts inside reasoning.
        enabled: False when thinking is disabled.
    """

    __slots__ = ("_end", "_turns", "_implicit", "_active")

    def __init__(
        self,
        end_id: int,
        *,
        turn_ids: Iterable[int] = (),
        implicit_end_ids: Iterable[int] = (),
        starts_open: bool = True,
        enabled: bool = True,
    ) -> None:
        self._end = end_id
        self._turns = frozenset(turn_ids)
        self._implicit = frozenset(implicit_end_ids)
        self._active = starts_open and enabled

    @classmethod
    def for_dialect(
        cls,
        reasoning_parser: str,
        tokenizer: Any,
        *,
        enable_thinking: bool | None = None,
    ) -> TokenReasoning:
        """Look the dialect's markers up in a real tokenizer.

        Raises:
            UnknownParserError: an unregistered reasoning parser.
            ValueError: the end marker is not a single token of this tokenizer.
        """
        spec = registry.get_reasoning_dialect(reasoning_parser)
        end = _single_id(tokenizer, spec.end)
        if end is None:
            raise ValueError(
                f"{spec.end!r} is not a single token of this tokenizer; token-level reasoning state needs it"
            )
        turns = [t for t in (_single_id(tokenizer, m) for m in spec.turn_markers) if t is not None]
        implicit = [t for t in (_single_id(tokenizer, m) for m in spec.implicit_end) if t is not None]
        return cls(
            end,
            turn_ids=turns,
            implicit_end_ids=implicit,
            starts_open=spec.starts_open,
            enabled=spec.default_enabled if enable_thinking is None else enable_thinking,
        )

    def _content_start(self, ids: Sequence[int]) -> int | None:
        begin = 0
        turns = self._turns
        if turns:
            for i in range(len(ids) - 1, -1, -1):
                if ids[i] in turns:
                    begin = i + 1
                    break
        end = self._end
        implicit = self._implicit
        for i in range(begin, len(ids)):
            t = ids[i]
            if t == end:
                return i + 1
            if t in implicit:
                return i
        return None

    def is_reasoning_end(self, ids: Sequence[int]) -> bool:
        """True when reasoning has ended in the current turn of ``ids`` (or there is none)."""
        if not self._active:
            return True
        return self._content_start(ids) is not None

    def extract_content_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids of the current turn's content, or ``ids`` unchanged when reasoning has not ended."""
        if not self._active:
            return list(ids)
        k = self._content_start(ids)
        return list(ids) if k is None else list(ids[k:])
