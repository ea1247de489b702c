"""The LFM2 driver: a pythonic call list, or JSON, between ``<|tool_call_start|>`` and ``<|tool_call_end|>``.

Liquid LFM2 / LFM2.5 (SGLang ``lfm2``, llama.cpp ``lfm2``): ``<|tool_call_start|>[f(a=1), g()]<|tool_call_end|>``.
The payload is a pythonic call list (the usual LFM2 output), or JSON: a list of
``{"name", "arguments"|"parameters"}`` objects or one such object (SGLang
accepts both). The first non-blank character after the opener decides:
``{`` one JSON object, ``[`` then ``{`` a JSON list, anything else the
pythonic list (which surfaces what is not a call list, e.g. an empty
block). Pythonic values use :func:`~deltaflow._core.pyliteral.lenient_literal_to_json` (vLLM's lfm2
recoveries: raw control characters inside strings, leading-zero integers,
sets as arrays, JSON ``true``/``false``/``null``) and the nested-quote rule
of :mod:`deltaflow.parsers.drivers.pythonic`. Both markers are special tokens
(vLLM refuses to start without their ids), so no prefix is declared.
A block opens anywhere; a bare ``[`` never does (llama.cpp: bracketed text
outside the markers is content).

Stable-prefix guarantee: as the JSON envelope and pythonic drivers state; the
dispatcher adds only the blanks after the opener until the payload's first
character (and, for a JSON list, the blanks and ``]`` before
``<|tool_call_end|>``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import final

from ..._core.pyliteral import lenient_literal_to_json
from ..._core.text import skip_json_ws, skip_space
from ...items import ToolDelta
from ..spec import DriverContext, FormatDefaults, ToolDriver
from .json_envelope import JsonEnvelopeDriver, JsonEnvelopeFormat
from .pythonic import PythonicDriver

__all__ = ("LFM2_END", "LFM2_START", "Lfm2Driver", "Lfm2Format")

LFM2_START = "<|tool_call_start|>"
"""LFM2's tool block opener (a special token)."""
LFM2_END = "<|tool_call_end|>"
"""LFM2's tool block closer (a special token)."""

_LFM2_OBJECT = JsonEnvelopeFormat(open=(LFM2_START,), close=LFM2_END, args_fields=("arguments", "parameters"))
_LFM2_LIST = JsonEnvelopeFormat(
    open=(LFM2_START, "["), close=None, args_fields=("arguments", "parameters"), separator=","
)
# Payload kinds.
_PYTHONIC, _OBJECT, _LIST = range(3)


@dataclass(frozen=True)
class Lfm2Format(FormatDefaults):
    """The LFM2 block (no options)."""

    @property
    def openers(self) -> tuple[str, ...]:
        """``<|tool_call_start|>``."""
        return (LFM2_START,)

    @property
    def markers(self) -> tuple[str, ...]:
        """The block's two markers."""
        return (LFM2_START, LFM2_END)

    def driver_factory(self) -> Callable[[DriverContext], Lfm2Driver]:
        """One :class:`Lfm2Driver` per block."""
        return Lfm2Driver


@final
class Lfm2Driver:
    """One LFM2 block: dispatches on the payload's first character (see the module docstring).

    Args:
        ctx: the block's context (channel, call numbering, tools).
    """

    __slots__ = ("done", "_ctx", "_inner", "_kind", "_tail", "_call", "_aborted")

    def __init__(self, ctx: DriverContext) -> None:
        self.done = False
        self._ctx = ctx
        self._inner: ToolDriver | None = None
        self._kind = _PYTHONIC
        self._tail = False
        self._call = -1
        self._aborted = False

    def feed_tool_block(self, text: str, out: list[object], final: bool, start: int = 0) -> int:
        """Consume what can be consumed of ``text[start:]`` (see :class:`~deltaflow.parsers.spec.ToolDriver`)."""
        inner = self._inner
        if inner is None:
            kind = self._choose(text, start, final)
            if kind is None:
                return start  # only blanks after the opener so far: held by the caller
            self._kind = kind
            if kind == _OBJECT:
                inner = JsonEnvelopeDriver(self._ctx, _LFM2_OBJECT)
            elif kind == _LIST:
                inner = JsonEnvelopeDriver(self._ctx, _LFM2_LIST)
            else:
                inner = PythonicDriver(
                    self._ctx, start=LFM2_START, end=LFM2_END, convert=lenient_literal_to_json, nested_quotes=True
                )
            self._inner = inner
        if not self._tail:
            mark = len(out)
            pos = inner.feed_tool_block(text, out, final, start)
            for ev in out[mark:]:
                if isinstance(ev, ToolDelta):
                    self._call = ev.call
                    self._aborted = self._aborted or ev.abort
            if not inner.done:
                return pos
            if self._kind != _LIST or self._aborted:
                self.done = True
                return pos
            self._tail = True
            start = pos
        return self._close_list(text, out, final, start)

    @staticmethod
    def _choose(text: str, start: int, final: bool) -> int | None:
        """The payload kind, from the first non-blank characters after the opener (None: not yet known)."""
        p = skip_space(text, start)
        if not text.startswith(LFM2_START, p):  # pragma: no cover - the feeder opens a block at the opener
            return _PYTHONIC
        n = len(text)
        q = skip_space(text, p + len(LFM2_START))
        if q >= n:
            return _PYTHONIC if final else None
        if text[q] == "{":
            return _OBJECT
        if text[q] != "[":
            return _PYTHONIC
        r = skip_space(text, q + 1)
        if r >= n:
            return _PYTHONIC if final else None
        return _LIST if text[r] == "{" else _PYTHONIC

    def _close_list(self, text: str, out: list[object], final: bool, pos: int) -> int:
        """After a JSON list's last element: ``]`` and ``<|tool_call_end|>`` are raw text of the last call."""
        n = len(text)
        p = skip_json_ws(text, pos)
        if p >= n and not final:
            return pos
        end = pos
        if p < n and text[p] == "]":
            end = p + 1
            q = skip_json_ws(text, end)
            if text.startswith(LFM2_END, q):
                end = q + len(LFM2_END)
            elif LFM2_END.startswith(text[q:]):  # blanks, or a closer cut by the chunk end
                if not final:
                    return pos
                if q < n:
                    end = n  # a closer cut short at the very end belongs to the call
        if end > pos:
            out.append(ToolDelta(call=self._call, channel=self._ctx.channel, raw=text[pos:end], end=True))
        self.done = True
        return end
