"""Source items: what an engine iterator may yield, normalized to :class:`~deltaflow.items.TokenChunk`."""

from __future__ import annotations

from ..items import TokenChunk

__all__ = ("to_chunk",)


def to_chunk(item: object) -> TokenChunk:
    """Normalize one source item.

    Accepted: ``str`` (text), ``int`` (one token id), ``list[int]`` or
    ``tuple[int, ...]`` (token ids), :class:`~deltaflow.items.TokenChunk`.

    Raises:
        TypeError: anything else (the message says what is accepted).
    """
    cls = item.__class__
    if cls is str:
        return TokenChunk(text=item)  # type: ignore[arg-type]
    if cls is TokenChunk:
        return item  # type: ignore[return-value]
    if cls is int:
        return TokenChunk(token_ids=[item])  # type: ignore[list-item]
    if cls is list or cls is tuple:
        ids = list(item)  # type: ignore[call-overload]
        if all(type(i) is int for i in ids):
            return TokenChunk(token_ids=ids)
    raise TypeError(
        f"a source item must be a str, an int token id, a list of int token ids or a TokenChunk; "
        f"got {type(item).__name__}"
    )
