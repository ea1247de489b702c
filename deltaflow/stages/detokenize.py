"""Detokenize: token ids -> text, UTF-8 safe across tokens, metadata carried along.

Stable-prefix guarantee: a character whose UTF-8 bytes span several
byte-level tokens is emitted once, whole, when its last byte arrives (never
as U+FFFD); nothing else is held. Special tokens that are protocol markers
(declared by the dialects in use, e.g. ``<think>``, ``<tool_call>``) reach
the next stage as their text; other special tokens (end of turn, padding)
are dropped from the text, while their ids stay in the chunk's metadata.

Supported tokenizers: a HF ``tokenizers.Tokenizer`` (incremental decoding
with ``tokenizers.decoders.DecodeStream``), a ``tiktoken.Encoding`` (token
bytes through an incremental UTF-8 decoder), or any object with a
``backend_tokenizer`` attribute holding a ``tokenizers.Tokenizer``
(transformers' fast tokenizers).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from typing import Any, Protocol

from ..errors import StateError
from ..items import ChunkEnd, TokenChunk

__all__ = ("Detokenizer", "TokenDecoder", "make_decoder")


class TokenDecoder(Protocol):
    """Incremental decoding of one response's token ids."""

    def step(self, token_id: int) -> str:
        """Decode one more token; return the text that became stable ("" if none)."""
        ...

    def flush(self) -> str:
        """The stream ended: return what is still held (incomplete UTF-8 as U+FFFD)."""
        ...


class _HFDecoder:
    __slots__ = ("_drop", "_pending", "_step", "_stream", "_tok")

    def __init__(self, tok: Any, drop: frozenset[int]) -> None:
        from tokenizers.decoders import DecodeStream

        self._tok = tok
        self._stream = DecodeStream(skip_special_tokens=False)
        self._step = self._stream.step
        self._drop = drop
        self._pending: list[int] = []  # ids whose bytes do not form a character yet

    def step(self, token_id: int) -> str:
        if token_id in self._drop:
            return ""
        text = self._step(self._tok, token_id)
        if text is None:
            self._pending.append(token_id)
            return ""
        if self._pending:
            self._pending = []
        return text

    def flush(self) -> str:
        # An output cut inside a character: decode what is held (as U+FFFD).
        if not self._pending:
            return ""
        text = self._tok.decode(self._pending, skip_special_tokens=False)
        self._pending = []
        return text  # type: ignore[no-any-return]


class _TiktokenDecoder:
    __slots__ = ("_bytes", "_drop", "_utf8")

    def __init__(self, enc: Any, drop: frozenset[int]) -> None:
        self._bytes = enc.decode_single_token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._drop = drop

    def step(self, token_id: int) -> str:
        if token_id in self._drop:
            return ""
        return self._utf8.decode(self._bytes(token_id))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


# The special ids to drop, by (tokenizer id, its size with added tokens, keep): a server makes a decoder
# per response with the same tokenizer, and reading its added-token table was most of that (about 10 µs
# of each response's setup, measured). The tokenizer is held with its entry, so that its id is not reused
# while the entry lives; a few entries only, since a tokenizer is large.
_SPECIAL_IDS: dict[tuple[int, int, frozenset[str]], tuple[Any, frozenset[int]]] = {}
_SPECIAL_IDS_MAX = 4


def _hf_special_ids(tok: Any, keep: frozenset[str]) -> frozenset[int]:
    key = (id(tok), tok.get_vocab_size(with_added_tokens=True), keep)  # adding tokens changes the size
    hit = _SPECIAL_IDS.get(key)
    if hit is not None and hit[0] is tok:
        return hit[1]
    drop = frozenset(
        tid for tid, added in tok.get_added_tokens_decoder().items() if added.special and added.content not in keep
    )
    if len(_SPECIAL_IDS) >= _SPECIAL_IDS_MAX:
        _SPECIAL_IDS.clear()
    _SPECIAL_IDS[key] = (tok, drop)
    return drop


def make_decoder(tokenizer: Any, keep: Iterable[str] = ()) -> TokenDecoder:
    """Return an incremental decoder for one response.

    Args:
        tokenizer: a ``tokenizers.Tokenizer``, a ``tiktoken.Encoding`` or a
            transformers fast tokenizer.
        keep: special-token texts to keep (protocol markers); other special
            tokens are dropped from the text.

    Raises:
        TypeError: the tokenizer kind is not supported (the message lists the supported ones).
    """
    keep = frozenset(keep)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        tokenizer = backend
    if hasattr(tokenizer, "get_added_tokens_decoder") and hasattr(tokenizer, "id_to_token"):
        return _HFDecoder(tokenizer, _hf_special_ids(tokenizer, keep))
    if hasattr(tokenizer, "decode_single_token_bytes") and hasattr(tokenizer, "special_tokens_set"):
        drop = frozenset(
            tokenizer.encode_single_token(s) for s in tokenizer.special_tokens_set if s not in keep
        )
        return _TiktokenDecoder(tokenizer, drop)
    raise TypeError(
        f"unsupported tokenizer {type(tokenizer).__name__}; expected a tokenizers.Tokenizer, "
        "a tiktoken.Encoding or a transformers fast tokenizer"
    )


class Detokenizer:
    """Turns :class:`~deltaflow.items.TokenChunk` s into text and :class:`~deltaflow.items.ChunkEnd` s.

    A chunk's :class:`~deltaflow.items.EngineUsage` (``TokenChunk.usage``) is
    emitted before its text, for the assembler.

    Args:
        tokenizer: see :func:`make_decoder`; None when every chunk carries text.
        keep: special-token texts that are protocol markers.
    """

    name = "detokenize"

    def __init__(self, tokenizer: Any = None, *, keep: Iterable[str] = ()) -> None:
        self._decoder: TokenDecoder | None = make_decoder(tokenizer, keep) if tokenizer is not None else None
        self._finished = False

    def feed(self, item: object) -> list[object]:
        """Decode one chunk; other items pass through."""
        if item.__class__ is not TokenChunk:
            return [item]
        assert isinstance(item, TokenChunk)
        ids = item.token_ids
        chars: list[int] | None = None
        if item.text is not None:
            text = item.text
            dec = self._decoder
            if dec is not None and ids:
                # The engine gave the text; decode anyway to learn each token's share of
                # it, which the reasoning-token count needs (kept only when it agrees).
                pieces = [dec.step(i) for i in ids]
                if "".join(pieces) == text:
                    chars = [len(p) for p in pieces]
            elif item.token_chars is not None and len(item.token_chars) == len(ids):
                chars = item.token_chars  # a merged chunk's own account (see TokenChunk.token_chars)
        elif ids:
            dec = self._decoder
            if dec is None:
                raise ValueError("the source gives token ids without text: pass tokenizer= to decode them")
            pieces = [dec.step(i) for i in ids]
            text = "".join(pieces)
            chars = [len(p) for p in pieces]
        else:
            text = ""
        end = ChunkEnd(token_ids=ids, logprobs=item.logprobs, finish_reason=item.finish_reason, token_chars=chars)
        if item.usage is not None:
            # The engine's counts go first: the assembler takes them in before it frames the chunk's text.
            return [item.usage, text, end] if text else [item.usage, end]
        return [text, end] if text else [end]

    def finish(self) -> list[object]:
        """Release what the decoder still holds."""
        if self._finished:
            raise StateError("Detokenizer.finish() called twice")
        self._finished = True
        rest = self._decoder.flush() if self._decoder is not None else ""
        return [rest] if rest else []
