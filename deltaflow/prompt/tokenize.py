"""Tokenize a rendered prompt so that only the template's own markers become control tokens.

:meth:`PromptTokenizer.encode` takes the prompt and its *plain spans* (the
marker text that came from untrusted values, from
:meth:`~deltaflow.prompt.protect.Protector.restore`). Outside the spans the
added tokens of the tokenizer are control tokens exactly as HF
``Tokenizer.encode(text, add_special_tokens=False)`` makes them (tiktoken:
``encode(text, allowed_special=...)``); the text of a span never becomes one.

How: the added tokens are found the way HF's added vocabulary finds them
(leftmost-longest over the literal token texts, non-normalized tokens first,
then normalized ones in the pieces between, ``lstrip``/``rstrip`` taking the
whitespace beside a token), but only in the text *outside* the spans: a span
is a barrier no match crosses. Each piece of text between two consecutive
control tokens, spans included, is then encoded in one piece by a *plain*
tokenizer: the same ``tokenizer.json`` without its added tokens (tiktoken:
``encode_ordinary``). HF encodes the pieces between added tokens
independently, with the same normalizer, pre-tokenizer and model, so without
spans the ids are HF's own, and a neutralized marker merges with the text
around it as any text would (``hi<|im_end|>`` -> ``hi`` ``<|`` ``im`` ...):
a span changes the segmentation only where a marker was actually
neutralized. The tests check the equality on every expected prompt of the
shared corpus and on random marker-laden text.

Limits: added tokens with ``single_word``, and ``normalized`` added tokens
under a normalizer that changes text, are refused
(:class:`UnsupportedTokenizerError`); a Metaspace pre-tokenizer with
``prepend_scheme: "first"`` is handled (a piece not at the start of the text
is encoded without the prefix, as HF does). Truncation and padding settings of the tokenizer are
ignored. Text tokens that the model's vocabulary maps to a control id are
checked for the marker texts only (the construction fails if a marker's text
encodes to a control id as plain text).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..errors import DeltaflowError
from ._literals import literal_alternation

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    import tiktoken
    from tokenizers import Tokenizer

__all__ = (
    "PIECE_CACHE_CHARS",
    "HFPromptTokenizer",
    "PromptTokenizer",
    "Span",
    "TiktokenPromptTokenizer",
    "UnsupportedTokenizerError",
    "load_prompt_tokenizer",
    "read_tiktoken_ranks",
)

Span = tuple[int, int]
"""``(start, end)`` character offsets of a plain span."""

# Unicode White_Space: what HF's ``\s`` (Rust regex) strips for lstrip/rstrip tokens.
# (Python's str.isspace also counts U+001C..U+001F, which Rust does not.)
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
_WHITE_SPACE += "\u2028\u2029\u202f\u205f\u3000"
_WS_RUN = re.compile(f"[{re.escape(_WHITE_SPACE)}]*")


class UnsupportedTokenizerError(DeltaflowError, ValueError):
    """A tokenizer whose control-token matching :class:`PromptTokenizer` cannot reproduce exactly."""


@runtime_checkable
class PromptTokenizer(Protocol):
    """Encodes a rendered prompt, the text of its plain spans never as control tokens."""

    @property
    def added_tokens(self) -> Mapping[str, int]:
        """The tokens matched outside the plain spans (the control tokens): text -> id."""
        ...

    @property
    def added_token_texts(self) -> tuple[str, ...]:
        """The marker texts to protect in untrusted values (in id order)."""
        ...

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids of the control tokens."""
        ...

    def encode(self, text: str, plain_spans: Iterable[Span] = ()) -> list[int]:
        """Token ids of ``text``; markers inside ``plain_spans`` are encoded as ordinary text."""
        ...

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``, control tokens written out (for debugging)."""
        ...


# ---------------------------------------------------------------------- splitting


@dataclass(frozen=True)
class _Added:
    content: str
    id: int
    lstrip: bool = False
    rstrip: bool = False


class _Phase:
    """One matching pass: the tokens of one trie (HF: normalized or not)."""

    def __init__(self, tokens: Sequence[_Added]) -> None:
        self.table = {t.content: t for t in tokens}
        self.regex = re.compile(literal_alternation(self.table))

    def scan(self, text: str, start: int, end: int, out: list[tuple[int, int, int]]) -> None:
        """Append ``(start, stop, id)`` of the matches in ``text[start:end]`` to ``out``."""
        prev = pos = start
        search, table = self.regex.search, self.table
        while True:
            m = search(text, pos, end)
            if m is None:
                return
            a, b = m.span()
            token = table[m.group()]
            if token.lstrip and a > prev:
                before = text[prev:a]
                a = prev + len(before.rstrip(_WHITE_SPACE))
            if token.rstrip:
                ws = _WS_RUN.match(text, b, end)
                assert ws is not None  # the pattern matches the empty string
                b = ws.end()
            out.append((a, b, token.id))
            prev = pos = b


def _regions(n: int, spans: Iterable[Span]) -> list[tuple[int, int]]:
    """The parts of ``range(n)`` outside ``spans`` (validated, sorted, overlaps merged)."""
    ordered = sorted(spans)
    if not ordered:
        return [(0, n)] if n else []
    out: list[tuple[int, int]] = []
    pos = 0
    for span in ordered:
        s, e = span
        if not (0 <= s <= e <= n):
            raise ValueError(f"plain span {span!r} is not within the text (length {n})")
        if s > pos:
            out.append((pos, s))
        pos = max(pos, e)
    if pos < n:
        out.append((pos, n))
    return out


class _Splitter:
    """Finds the control tokens of a text outside its plain spans, HF's way."""

    def __init__(self, phases: Sequence[Sequence[_Added]]) -> None:
        self._phases = [_Phase(p) for p in phases if p]

    def split(self, text: str, spans: Iterable[Span]) -> list[int | tuple[int, int]]:
        """Control-token ids and ``(start, end)`` text pieces, in order, covering ``text``."""
        regions = _regions(len(text), spans)
        matches: list[tuple[int, int, int]] = []
        for phase_no, phase in enumerate(self._phases):
            if phase_no == 0:
                for a, b in regions:
                    phase.scan(text, a, b, matches)
                continue
            # A later phase looks only at what the earlier ones left, region by region.
            found = sorted(matches)
            new: list[tuple[int, int, int]] = []
            k = 0
            for a, b in regions:
                pos = a
                while k < len(found) and found[k][0] < b:
                    s, e, _ = found[k]
                    if s > pos:
                        phase.scan(text, pos, s, new)
                    pos = max(pos, e)
                    k += 1
                if pos < b:
                    phase.scan(text, pos, b, new)
            matches = found + new
        matches.sort()
        items: list[int | tuple[int, int]] = []
        pos = 0
        for s, e, token_id in matches:
            if s > pos:
                items.append((pos, s))
            items.append(token_id)
            pos = e
        if pos < len(text):
            items.append((pos, len(text)))
        return items


PIECE_CACHE_CHARS = 1 << 21
"""The default bound of a prompt tokenizer's piece cache, in characters of cached text (0: no cache)."""


class _PieceCache:
    """The ids of recently encoded pieces, by their text (least recently used out first).

    A client of a chat API sends the whole conversation every turn: an agent's
    next request repeats the previous prompt and adds a few messages. The
    pieces between control tokens (a message's text, the tool list) therefore
    come back verbatim, and their ids do not change, since each piece is
    encoded on its own anyway. Only the new pieces reach the tokenizer.

    Bounded by the characters of text it holds (the ids take about as much
    again); a piece longer than a quarter of the bound is not kept. Safe to
    share between threads. Like an engine's prefix cache (which skips far
    more work), it serves a text some client sent recently a little faster;
    ``piece_cache_chars=0`` turns it off.
    """

    __slots__ = ("_chars", "_entries", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chars = 0
        self._entries: dict[object, tuple[list[int], int]] = {}
        self._lock = threading.Lock()

    def get(self, key: object) -> list[int] | None:
        """The ids of ``key``'s piece, or None; a hit becomes the most recent entry."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self._entries[key] = entry
            return entry[0]

    def put(self, key: object, size: int, ids: list[int]) -> None:
        """Keep ``ids`` for ``key`` (``size``: the piece's length), evicting the oldest entries past the bound."""
        if size * 4 > self._limit:
            return
        with self._lock:
            entries = self._entries
            if key in entries:
                return
            entries[key] = (ids, size)
            self._chars += size
            while self._chars > self._limit:
                self._chars -= entries.pop(next(iter(entries)))[1]

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self._entries)


class _SplitTokenizer:
    """Shared :meth:`encode`: split on control tokens, encode the pieces between them as plain text."""

    _splitter: _Splitter
    _added: dict[str, int]
    _markers: tuple[str, ...]
    _special: frozenset[int]
    _cache: _PieceCache | None = None
    # True where a piece at the very start of the text encodes differently (Metaspace "first")
    _first_differs = False

    def _encode_pieces(self, text: str, pieces: Sequence[tuple[int, int]]) -> list[list[int]]:
        raise NotImplementedError

    def _set_cache(self, chars: int) -> None:
        if chars < 0:
            raise ValueError(f"piece_cache_chars must be >= 0 (0: no cache), not {chars}")
        self._cache = _PieceCache(chars) if chars else None

    def clear_cache(self) -> None:
        """Forget the cached ids of earlier pieces (see ``piece_cache_chars``)."""
        if self._cache is not None:
            self._cache.clear()

    @property
    def added_tokens(self) -> Mapping[str, int]:
        """The tokens matched outside the plain spans: text -> id (read-only)."""
        return MappingProxyType(self._added)

    @property
    def added_token_texts(self) -> tuple[str, ...]:
        """The marker texts to protect in untrusted values (in id order)."""
        return self._markers

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids of the control tokens."""
        return self._special

    def encode(self, text: str, plain_spans: Iterable[Span] = ()) -> list[int]:
        """Token ids of ``text``, the markers inside ``plain_spans`` encoded as ordinary text.

        Args:
            text: the rendered prompt.
            plain_spans: ``(start, end)`` offsets of text that must not become
                control tokens (any order; overlaps are merged).

        Returns:
            The ids. With no spans they equal the library's own encoding of
            ``text`` (HF: ``encode(text, add_special_tokens=False).ids``).

        Raises:
            ValueError: a span outside the text.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        items = self._splitter.split(text, plain_spans)
        # With the cache, each piece's text is its key (a piece at the start of the text under Metaspace
        # "first" gets its own key); the pieces not found (all of them without a cache) are encoded in
        # one batch.
        cache = self._cache
        first = self._first_differs
        parts: list[int | list[int] | None] = []
        keys: list[object] = []
        missing: list[tuple[int, int]] = []
        for it in items:
            if isinstance(it, int):
                parts.append(it)
                continue
            ids: list[int] | None = None
            key: object = None
            if cache is not None:
                s, e = it
                key = text[s:e] if s or not first else ("first", text[s:e])
                ids = cache.get(key)
            if ids is None:
                missing.append(it)
                keys.append(key)
            parts.append(ids)
        fresh = iter(zip(missing, keys, self._encode_pieces(text, missing) if missing else (), strict=True))
        out: list[int] = []
        for part in parts:
            if isinstance(part, int):
                out.append(part)
            elif part is not None:
                out.extend(part)
            else:
                (s, e), key, ids = next(fresh)
                if cache is not None:
                    cache.put(key, e - s, ids)
                out.extend(ids)
        return out


# ---------------------------------------------------------------------- HF tokenizers


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "HFPromptTokenizer needs the 'tokenizers' package: pip install 'deltaflow[hf]'"
        ) from exc
    return tokenizers


def _is_identity_normalizer(node: Any) -> bool:
    if node is None:
        return True
    if isinstance(node, Mapping) and node.get("type") == "Sequence":
        return all(_is_identity_normalizer(n) for n in node.get("normalizers") or ())
    return False


def _state(component: Any) -> Any:
    """The JSON config of a normalizer or pre-tokenizer (None stays None)."""
    return None if component is None else json.loads(component.__getstate__())


def _pre_tokenizer_from_config(tk: Any, config: Any) -> Any:
    """A pre-tokenizer object from its JSON config (through a tokenizer with an empty word-level model)."""
    shell = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": config,
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"<unk>": 0}, "unk_token": "<unk>"},
    }
    return tk.Tokenizer.from_str(json.dumps(shell)).pre_tokenizer


def _rewrite_first_prepend(node: Any) -> tuple[Any, bool]:
    """Copy of a pre-tokenizer config with Metaspace ``prepend_scheme: "first"`` set to ``"never"``."""
    if isinstance(node, Mapping):
        changed = False
        out: dict[str, Any] = {}
        for k, v in node.items():
            nv, c = _rewrite_first_prepend(v)
            out[k] = nv
            changed = changed or c
        if out.get("type") == "Metaspace" and out.get("prepend_scheme") == "first":
            out["prepend_scheme"] = "never"
            changed = True
        return out, changed
    if isinstance(node, list):
        items = [_rewrite_first_prepend(v) for v in node]
        return [v for v, _ in items], any(c for _, c in items)
    return node, False


class HFPromptTokenizer(_SplitTokenizer):
    """A :class:`PromptTokenizer` over an HF ``tokenizers.Tokenizer``.

    Every added token (special or not: Qwen's ``<tool_call>`` and ``<think>``
    are ``special: false``) is a control token outside the plain spans; the
    markers to protect are those whose text is not only whitespace.

    Args:
        tokenizer: the tokenizer (not modified; the plain tokenizer shares
            its model, normalizer and pre-tokenizer, without the added tokens).
        piece_cache_chars: the bound of the cache of recently encoded pieces
            (characters of text; 0: none). Pieces come back verbatim in a
            conversation's later turns; the ids are the same either way.

    Raises:
        ValueError: negative ``piece_cache_chars``.
        UnsupportedTokenizerError: ``single_word`` added tokens, ``normalized``
            added tokens under a normalizer that changes text, or a marker
            whose text the plain tokenizer encodes to a control id.
        ImportError: ``tokenizers`` is not installed.
    """

    def __init__(self, tokenizer: Tokenizer, *, piece_cache_chars: int = PIECE_CACHE_CHARS) -> None:
        tk = _import_tokenizers()
        self._set_cache(piece_cache_chars)
        self._tok = tokenizer
        decoder = tokenizer.get_added_tokens_decoder()
        identity = _is_identity_normalizer(_state(tokenizer.normalizer))
        raw: list[_Added] = []
        normalized: list[_Added] = []
        single_word: list[str] = []
        changed_by_normalizer: list[str] = []
        self._added = {}
        for token_id in sorted(decoder):
            t = decoder[token_id]
            if not t.content:
                continue
            if t.single_word:
                single_word.append(t.content)
            if t.normalized and not identity:
                changed_by_normalizer.append(t.content)
            entry = _Added(t.content, token_id, bool(t.lstrip), bool(t.rstrip))
            (normalized if t.normalized else raw).append(entry)
            self._added[t.content] = token_id
        if single_word:
            raise UnsupportedTokenizerError(
                f"added tokens with single_word=true are not supported: {single_word[:5]!r}"
            )
        if changed_by_normalizer:
            raise UnsupportedTokenizerError(
                "added tokens with normalized=true under a normalizer that changes text are not supported: "
                f"{changed_by_normalizer[:5]!r}"
            )
        self._splitter = _Splitter([raw, normalized])
        self._markers = tuple(c for c in self._added if c.strip())
        self._special = frozenset(self._added[m] for m in self._markers)
        # The plain tokenizer shares the model, normalizer and pre-tokenizer (no copy of the vocabulary);
        # it has no added tokens, no post-processor, no truncation or padding.
        self._plain: Tokenizer = tk.Tokenizer(tokenizer.model)
        self._plain.normalizer = tokenizer.normalizer
        self._plain.pre_tokenizer = tokenizer.pre_tokenizer
        self._plain_rest: Tokenizer = self._plain
        rest_pre, changed = _rewrite_first_prepend(_state(tokenizer.pre_tokenizer))
        if changed:
            self._first_differs = True
            self._plain_rest = tk.Tokenizer(tokenizer.model)
            self._plain_rest.normalizer = tokenizer.normalizer
            self._plain_rest.pre_tokenizer = _pre_tokenizer_from_config(tk, rest_pre)
        unk = getattr(tokenizer.model, "unk_token", None)
        self._check_plain(exempt=self._added.get(unk) if isinstance(unk, str) else None)

    def _check_plain(self, exempt: int | None) -> None:
        # The model's unknown token may be an added token; text the vocabulary cannot spell becomes it anyway.
        control = self.special_ids - {exempt}
        bad = [
            m
            for m, ids in zip(self._markers, self._plain_batch(self._plain, list(self._markers)), strict=True)
            if control.intersection(ids)
        ]
        if bad:
            raise UnsupportedTokenizerError(f"these markers encode to control ids even as plain text: {bad[:5]!r}")

    @staticmethod
    def _plain_batch(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        if len(texts) == 1:
            return [tok.encode(texts[0], add_special_tokens=False).ids]
        fast = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
        return [e.ids for e in fast(texts, add_special_tokens=False)]

    def _encode_pieces(self, text: str, pieces: Sequence[tuple[int, int]]) -> list[list[int]]:
        if self._plain_rest is self._plain:
            return self._plain_batch(self._plain, [text[s:e] for s, e in pieces])
        # Metaspace "first": only a piece at the very start of the text gets the prefix.
        out = self._plain_batch(self._plain_rest, [text[s:e] for s, e in pieces])
        if pieces and pieces[0][0] == 0:
            s, e = pieces[0]
            out[0] = self._plain.encode(text[s:e], add_special_tokens=False).ids
        return out

    @property
    def tokenizer(self) -> Tokenizer:
        """The wrapped tokenizer."""
        return self._tok

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``, control tokens written out.

        Args:
            ids: token ids.

        Returns:
            HF ``decode(ids, skip_special_tokens=False)``.
        """
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    @classmethod
    def from_str(cls, json_text: str) -> HFPromptTokenizer:
        """Build from the text of a ``tokenizer.json``.

        Args:
            json_text: the JSON.

        Returns:
            The prompt tokenizer.
        """
        tk = _import_tokenizers()
        return cls(tk.Tokenizer.from_str(json_text))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HFPromptTokenizer:
        """Build from a ``tokenizer.json``, a ``tokenizer.json.gz``, or a folder holding one.

        Args:
            path: the file or the model folder.

        Returns:
            The prompt tokenizer.

        Raises:
            FileNotFoundError: no tokenizer file there.
        """
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"{p} does not exist (expected tokenizer.json, tokenizer.json.gz or their folder)")
        if p.is_dir():
            for name in ("tokenizer.json", "tokenizer.json.gz"):
                if (p / name).is_file():
                    p = p / name
                    break
            else:
                raise FileNotFoundError(f"no tokenizer.json or tokenizer.json.gz in {p}")
        if p.name.endswith(".gz"):
            with gzip.open(p, "rt", encoding="utf-8") as f:
                return cls.from_str(f.read())
        return cls.from_str(p.read_text(encoding="utf-8"))


def load_prompt_tokenizer(model_dir: str | os.PathLike[str]) -> HFPromptTokenizer:
    """The prompt tokenizer of a model folder (its ``tokenizer.json``, or ``tokenizer.json.gz``).

    Args:
        model_dir: the folder (or the tokenizer file itself).

    Returns:
        An :class:`HFPromptTokenizer`. Nothing is downloaded.

    Raises:
        FileNotFoundError: no tokenizer file there.
        UnsupportedTokenizerError: see :class:`HFPromptTokenizer`.
        ImportError: ``tokenizers`` is not installed.
    """
    return HFPromptTokenizer.from_file(model_dir)


# ---------------------------------------------------------------------- tiktoken


def _import_tiktoken() -> Any:
    try:
        import tiktoken
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "TiktokenPromptTokenizer needs the 'tiktoken' package: pip install 'deltaflow[tiktoken]'"
        ) from exc
    return tiktoken


def read_tiktoken_ranks(path: str | os.PathLike[str], expected_sha256: str | None = None) -> dict[bytes, int]:
    """Read a ``.tiktoken`` ranks file (``base64 rank`` lines) from disk, with no download and no cache.

    Args:
        path: the file.
        expected_sha256: check the file's hash (hex) when given.

    Returns:
        The mergeable ranks.

    Raises:
        ValueError: a hash mismatch or a malformed line.
    """
    data = Path(path).read_bytes()
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256.lower():
        raise ValueError(f"{path}: sha256 {hashlib.sha256(data).hexdigest()} is not the expected {expected_sha256}")
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{n}: expected 'base64 rank'")
        ranks[base64.b64decode(parts[0])] = int(parts[1])
    return ranks


class TiktokenPromptTokenizer(_SplitTokenizer):
    """A :class:`PromptTokenizer` over a ``tiktoken.Encoding``.

    Outside the plain spans the ``allowed_special`` tokens are control tokens
    (as ``encode(text, allowed_special=allowed_special, disallowed_special=())``
    makes them); other special-token text, and everything inside the spans,
    is encoded with ``encode_ordinary``. Every special token is a marker to
    protect.

    Args:
        encoding: the encoding.
        allowed_special: the special tokens that are control tokens in the
            template's text (``"all"``: every one).
        piece_cache_chars: the bound of the cache of recently encoded pieces
            (characters of text; 0: none). Pieces come back verbatim in a
            conversation's later turns; the ids are the same either way.

    Raises:
        ValueError: negative ``piece_cache_chars``; an ``allowed_special`` name that is not a special token.
        UnsupportedTokenizerError: a marker that encodes to a control id as ordinary text.
        ImportError: ``tiktoken`` is not installed.
    """

    def __init__(
        self,
        encoding: tiktoken.Encoding,
        *,
        allowed_special: Literal["all"] | AbstractSet[str] = "all",
        piece_cache_chars: int = PIECE_CACHE_CHARS,
    ) -> None:
        _import_tiktoken()
        self._set_cache(piece_cache_chars)
        self._enc = encoding
        specials = set(encoding.special_tokens_set)
        if allowed_special == "all":
            allowed = specials
        else:
            allowed = set(allowed_special)
            unknown = sorted(allowed - specials)
            if unknown:
                raise ValueError(f"not special tokens of {encoding.name}: {unknown[:5]!r}")
        ids = {s: encoding.encode_single_token(s) for s in specials}
        self._added = {s: ids[s] for s in sorted(allowed, key=ids.__getitem__)}
        self._markers = tuple(sorted(specials, key=ids.__getitem__))
        self._special = frozenset(self._added.values())
        self._splitter = _Splitter([[_Added(s, i) for s, i in self._added.items()]])
        control = self.special_ids
        bad = [m for m in self._markers if control.intersection(encoding.encode_ordinary(m))]
        if bad:
            raise UnsupportedTokenizerError(f"these markers encode to control ids even as plain text: {bad[:5]!r}")

    @property
    def added_token_texts(self) -> tuple[str, ...]:
        """Every special token's text (in id order), allowed or not: all are protected."""
        return self._markers

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The wrapped encoding."""
        return self._enc

    def _encode_pieces(self, text: str, pieces: Sequence[tuple[int, int]]) -> list[list[int]]:
        ordinary = self._enc.encode_ordinary
        return [ordinary(text[s:e]) for s, e in pieces]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``, special tokens written out (invalid UTF-8 replaced).

        Args:
            ids: token ids.

        Returns:
            The text.
        """
        return str(self._enc.decode(list(ids)))

    @classmethod
    def from_files(
        cls,
        ranks_path: str | os.PathLike[str],
        config_path: str | os.PathLike[str] | None = None,
        *,
        pat_str: str | None = None,
        special_tokens: Mapping[str, int] | None = None,
        name: str | None = None,
        expected_sha256: str | None = None,
        allowed_special: Literal["all"] | AbstractSet[str] = "all",
    ) -> TiktokenPromptTokenizer:
        """Build an encoding from local files (a ``.tiktoken`` ranks file and a JSON config); nothing is downloaded.

        Args:
            ranks_path: the ``.tiktoken`` file.
            config_path: a JSON object with ``pat_str`` and ``special_tokens``
                (text -> id), e.g. ``o200k_harmony.json``; the keyword
                arguments override it.
            pat_str: the pre-tokenizer pattern.
            special_tokens: the special tokens.
            name: the encoding's name (default: the config's ``name``, else the ranks file's stem).
            expected_sha256: check the ranks file's hash.
            allowed_special: as for the constructor.

        Returns:
            The prompt tokenizer.

        Raises:
            ValueError: no ``pat_str``, or a bad ranks file.
        """
        tiktoken = _import_tiktoken()
        config: dict[str, Any] = {}
        if config_path is not None:
            config = json.loads(Path(config_path).read_text(encoding="utf-8"))
        pattern = pat_str if pat_str is not None else config.get("pat_str")
        if not pattern:
            raise ValueError("a tiktoken encoding needs pat_str (argument or config)")
        specials = dict(special_tokens if special_tokens is not None else config.get("special_tokens", {}))
        ranks = read_tiktoken_ranks(ranks_path, expected_sha256)
        enc = tiktoken.Encoding(
            name or config.get("name") or Path(ranks_path).stem,
            pat_str=pattern,
            mergeable_ranks=ranks,
            special_tokens=specials,
        )
        return cls(enc, allowed_special=allowed_special)
