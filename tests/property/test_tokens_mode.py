"""``chunking="tokens"`` with real tokenizers: token-aligned streams rebuild parse_complete; declared prefixes suffice.

The reference tokenizers are read from ``../shared/tokenizers`` at test time
(never copied here); each test skips, saying so, when they are absent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from deltaflow import accumulate, normalize_tools, parse_complete
from deltaflow.parsers import registry
from deltaflow.testing import feed_chunks, load_tokenizer, message_key, shared_dir

from .corpus import VECTORS, vector_kwargs
from .strategies import ENVELOPES, Generated, check_delta_invariants, configs, generated_outputs, think_parsers

# -- reference tokenizers ---------------------------------------------------------------------------


def has_tokenizer(family: str) -> bool:
    """Whether ``shared/tokenizers/<family>/tokenizer.json.gz`` exists (without loading it)."""
    root = shared_dir()
    return root is not None and (root / "tokenizers" / family / "tokenizer.json.gz").is_file()


def reference_tokenizers(tool_parser: str | None, reasoning_parser: str | None) -> tuple[str, ...]:
    """The tokenizers declared by every parser in use (their intersection), in the first parser's order."""
    declared: list[tuple[str, ...]] = []
    if tool_parser is not None:
        declared.append(registry.get_tool_dialect(tool_parser).tokenizers)
    if reasoning_parser is not None:
        declared.append(registry.get_reasoning_dialect(reasoning_parser).tokenizers)
    if not declared:
        return ()
    return tuple(f for f in declared[0] if all(f in d for d in declared[1:]))


def server_pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """The text a server streams for each token: new stable text only, incomplete UTF-8 held back.

    This is the incremental detokenization of inference servers (vLLM's
    ``detokenize_incrementally``): decode the growing id list with
    ``skip_special_tokens=False`` and emit what it adds, holding text that
    ends in U+FFFD (a multi-byte character cut by a token boundary) until a
    later token completes it. Decoding restarts at the last emitted
    boundary rather than at 0, which gives the same text for byte-level BPE
    and keeps this linear. Whatever is still held at the end is flushed.
    """
    pieces: list[str] = []
    prefix_offset = read_offset = 0
    prefix_text = ""
    for i in range(len(ids)):
        new_text = tokenizer.decode(list(ids[prefix_offset : i + 1]), skip_special_tokens=False)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            pieces.append(new_text[len(prefix_text) :])
            prefix_offset, read_offset = read_offset, i + 1
            prefix_text = tokenizer.decode(list(ids[prefix_offset:read_offset]), skip_special_tokens=False)
        else:
            pieces.append("")
    if pieces:
        rest = tokenizer.decode(list(ids[prefix_offset:]), skip_special_tokens=False)
        pieces[-1] += rest[len(prefix_text) :]
    return pieces


@lru_cache(maxsize=4096)
def token_texts(family: str, text: str) -> tuple[str, ...] | None:
    """The per-token stream of ``text`` under ``family``, or None when it does not rebuild ``text``.

    A text whose streamed pieces do not concatenate back to it is skipped by
    the callers: tokens mode promises stream == complete for *the text the
    server produced*, and then that text is not this one (e.g. the Qwen
    tokenizers normalize to NFC, and a U+FFFD the text itself ends with is
    only flushed at the very end).
    """
    tokenizer = load_tokenizer(family)
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    pieces = tuple(server_pieces(tokenizer, ids))
    return pieces if "".join(pieces) == text else None


def group_tokens(pieces: Sequence[str], sizes: Sequence[int]) -> list[str]:
    """Join consecutive token texts into chunks of ``sizes`` tokens (cycled)."""
    chunks: list[str] = []
    i = k = 0
    while i < len(pieces):
        n = sizes[k % len(sizes)]
        chunks.append("".join(pieces[i : i + n]))
        i += n
        k += 1
    return chunks or [""]


_SIZES = st.integers(1, 8).flatmap(lambda k: st.lists(st.integers(1, k), min_size=1, max_size=40))


def tokens_rebuild(chunks: Sequence[str], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Feed token-aligned ``chunks`` with ``chunking="tokens"``; check the delta contract; return the rebuilt key."""
    deltas = feed_chunks(chunks, chunking="tokens", **kwargs)
    specs = normalize_tools(kwargs.get("tools"))
    check_delta_invariants(deltas, None if specs is None else [s.name for s in specs])
    return message_key(accumulate(deltas))


# -- 2a: corpus and generated texts, token-aligned ---------------------------------------------------

CORPUS_GROUPS: dict[str, list[dict[str, Any]]] = defaultdict(list)
for _v in VECTORS:
    for _family in reference_tokenizers(_v["tool_parser"], _v["reasoning_parser"]):
        if has_tokenizer(_family):
            CORPUS_GROUPS[f"{_v['tool_parser'] or '-'}+{_v['reasoning_parser'] or '-'}@{_family}"].append(_v)
CORPUS_PARAMS: list[Any] = sorted(CORPUS_GROUPS) or [
    pytest.param("none", marks=pytest.mark.skip(reason="../shared (corpus and tokenizers) is not beside this checkout"))
]


@pytest.mark.shared
@pytest.mark.parametrize("group", CORPUS_PARAMS)
def test_corpus_token_by_token(shared: Path, group: str) -> None:
    """Every in-scope corpus text, streamed one token at a time by a reference tokenizer, rebuilds parse_complete."""
    family = group.rsplit("@", 1)[1]
    skipped = []
    for vector in CORPUS_GROUPS[group]:
        pieces = token_texts(family, vector["text"])
        if pieces is None:  # the server would not have produced this text (see token_texts)
            skipped.append(vector["id"])
            continue
        kwargs = vector_kwargs(vector)
        want = message_key(parse_complete(vector["text"], **kwargs))
        assert tokens_rebuild(pieces, kwargs) == want, f"{vector['id']} token by token ({family})"
    assert len(skipped) < len(CORPUS_GROUPS[group]), f"no text of {group} survives detokenization: {skipped}"


@pytest.mark.shared
@pytest.mark.parametrize("group", CORPUS_PARAMS)
@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corpus_token_groups(shared: Path, group: str, data: st.DataObject) -> None:
    """An in-scope corpus text streamed in chunks of 1..k tokens, with chunking="tokens", rebuilds parse_complete."""
    family = group.rsplit("@", 1)[1]
    vector = data.draw(st.sampled_from(CORPUS_GROUPS[group]), label="vector")
    pieces = token_texts(family, vector["text"])
    assume(pieces is not None)  # not a text the server would produce (see token_texts)
    assert pieces is not None
    chunks = group_tokens(pieces, data.draw(_SIZES, label="tokens per chunk"))
    kwargs = vector_kwargs(vector)
    assert tokens_rebuild(chunks, kwargs) == message_key(parse_complete(vector["text"], **kwargs)), vector["id"]


TOKENIZED_PAIRS = [
    (tp, rp)
    for tp in (*ENVELOPES, None)
    for rp in (*think_parsers(), None)
    if (tp is not None or rp is not None) and reference_tokenizers(tp, rp)
]


@pytest.mark.shared
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gen=generated_outputs(configs(pairs=TOKENIZED_PAIRS)), data=st.data())
def test_generated_token_groups(shared: Path, gen: Generated, data: st.DataObject) -> None:
    """A generated output streamed by a reference tokenizer in chunks of 1..k tokens rebuilds parse_complete."""
    cfg = gen.config
    families = [f for f in reference_tokenizers(cfg.tool_parser, cfg.reasoning_parser) if has_tokenizer(f)]
    assume(families)  # none of this pair's tokenizers is in ../shared
    family = data.draw(st.sampled_from(families), label="tokenizer")
    pieces = token_texts(family, gen.text)
    assume(pieces is not None)  # not a text the server would produce (see token_texts)
    assert pieces is not None
    chunks = group_tokens(pieces, data.draw(_SIZES, label="tokens per chunk"))
    kwargs = cfg.kwargs()
    assert tokens_rebuild(chunks, kwargs) == message_key(parse_complete(gen.text, **kwargs))


@pytest.mark.shared
def test_server_pieces_hold_split_characters(shared: Path) -> None:
    """The server-style detokenizer never emits U+FFFD for a character split across byte-level tokens."""
    tokenizer = load_tokenizer("qwen3")
    if tokenizer is None:
        pytest.skip("../shared/tokenizers/qwen3 is absent")
    text = "天气 𝔘 🫠 ok"  # rare characters: several byte-level tokens each
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    pieces = server_pieces(tokenizer, ids)
    assert len(ids) > len([p for p in pieces if p])  # some character spans several tokens
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)


# -- 2b: the declared token prefixes suffice -----------------------------------------------------------


def routed(tool_parser: str | None, reasoning_parser: str | None) -> bool:
    """Whether a routing machine, not the marker holdback, handles this parser's markers (gpt-oss Harmony)."""
    try:
        from deltaflow.stages.router import router_factory
    except ImportError:  # pragma: no cover - before the channel router existed
        return False
    return router_factory(tool_parser, reasoning_parser, reasoning=reasoning_parser is not None).make is not None


def marker_cases() -> list[tuple[str, str, tuple[str, ...], str]]:
    """``(parser, marker, declared token_prefixes, tokenizer family)`` for every held-back marker of every parser."""
    cases = []
    for name in registry.reasoning_dialect_names():
        spec = registry.get_reasoning_dialect(name)
        if not routed(None, name):
            for marker in dict.fromkeys((spec.start, spec.end, *spec.implicit_end)):
                cases += [(f"reasoning:{name}", marker, spec.token_prefixes, f) for f in spec.tokenizers]
    for name in registry.tool_dialect_names():
        dialect = registry.get_tool_dialect(name)
        if not routed(name, None):
            for marker in dict.fromkeys((*dialect.openers, *dialect.start_openers)):
                cases += [(f"tool:{name}", marker, dialect.token_prefixes, f) for f in dialect.tokenizers]
    return cases


MARKER_CASES = marker_cases()
BEFORE = (
    "", "a", "Hello", "word ", " ", "  ", "\n", "\n\n", "\t", ".", "!", "?", ":", ",", ";", '"', "'", "(", ")",
    "[", "]", "{", "}", '{"', "`", "```\n", "1", "123", "-", " -", "_", "/", "\\", "|", "<", "<<", "</", "<|",
    ">", "x<", "a.", "...", "—", "天气", "😀", "<think>", "</think>", "<tool_call>", "</tool_call>", "ink",
    "think",
)
AFTER = (
    "", "\n", "\n\n", "\n\n\n", "\r\n", " ", "  ", "\t", "a", "s", "The", "ing", "think", "name", "ok", "1", "{",
    '{"', " {", "\n{", "[", '"', ".", ",", ":", "!", ")", ">", ">>", "|", "|>", "_", "<", "</", "<|", "天", "😀",
    "\n\nThe", "ink>",
)


def undeclared_boundaries(
    tokenizer: Any, marker: str, prefixes: Sequence[str], contexts: Sequence[tuple[str, str]]
) -> dict[str, tuple[str, list[str]]]:
    """Token boundaries strictly inside ``marker`` whose prefix is not declared: ``{prefix: (text, tokens)}``."""
    missing: dict[str, tuple[str, list[str]]] = {}
    texts = [before + marker + after for before, after in contexts]
    for (before, _), text, enc in zip(contexts, texts, tokenizer.encode_batch(texts, add_special_tokens=False), strict=True):
        start = len(before)
        for lo, hi in enc.offsets:
            for cut in (lo, hi):
                if start < cut < start + len(marker) and marker[: cut - start] not in prefixes:
                    missing.setdefault(marker[: cut - start], (text, enc.tokens))
    return missing


def _case_id(case: tuple[str, str, tuple[str, ...], str]) -> str:
    return f"{case[0]}:{case[1]}@{case[3]}"


@pytest.mark.shared
@pytest.mark.parametrize("case", MARKER_CASES, ids=_case_id)
def test_declared_token_prefixes_suffice(shared: Path, case: tuple[str, str, tuple[str, ...], str]) -> None:
    """Every token boundary inside a marker, in many contexts, leaves a prefix the parser declares in token_prefixes."""
    owner, marker, prefixes, family = case
    tokenizer = load_tokenizer(family)
    if tokenizer is None:
        pytest.skip(f"no HF tokenizer.json for {family!r} in ../shared/tokenizers")
    missing = undeclared_boundaries(tokenizer, marker, prefixes, [(b, a) for b in BEFORE for a in AFTER])
    assert not missing, f"{owner}: {family} leaves undeclared prefixes of {marker!r} at a token boundary: " + "; ".join(
        f"{p!r} (e.g. {text!r} -> {tokens})" for p, (text, tokens) in sorted(missing.items())
    )


_CONTEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(" \n\t.,:;!?\"'()[]{}<>|/\\_-=*#`~aAzZ019"), st.characters(codec="utf-8")
    ),
    max_size=6,
)


@pytest.mark.shared
@pytest.mark.parametrize("case", MARKER_CASES, ids=_case_id)
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=_CONTEXT, after=_CONTEXT)
def test_declared_token_prefixes_suffice_random_contexts(
    shared: Path, case: tuple[str, str, tuple[str, ...], str], before: str, after: str
) -> None:
    """The same, with random text before and after the marker."""
    owner, marker, prefixes, family = case
    tokenizer = load_tokenizer(family)
    if tokenizer is None:
        pytest.skip(f"no HF tokenizer.json for {family!r} in ../shared/tokenizers")
    assert not undeclared_boundaries(tokenizer, marker, prefixes, [(before, after)]), (owner, family)


# -- 2c: documented single-token facts -------------------------------------------------------------------


@pytest.mark.shared
@pytest.mark.parametrize(
    ("family", "marker"),
    [
        ("qwen3", "<think>"),
        ("qwen3", "</think>"),
        ("qwen3", "<tool_call>"),
        ("qwen3", "</tool_call>"),
        ("llama3", "<|python_tag|>"),
    ],
)
def test_atomic_markers_are_one_token(shared: Path, family: str, marker: str) -> None:
    """Qwen3 encodes <think>, </think>, <tool_call>, </tool_call> as one token each; Llama 3 <|python_tag|> too."""
    tokenizer = load_tokenizer(family)
    if tokenizer is None:
        pytest.skip(f"../shared/tokenizers/{family} is absent")
    for text in (marker, "x" + marker + "\n", "Hello.\n\n" + marker + "{"):
        enc = tokenizer.encode(text, add_special_tokens=False)
        start = text.index(marker)
        assert (start, start + len(marker)) in enc.offsets, f"{marker!r} is not one token in {text!r}: {enc.tokens}"
        token = enc.ids[enc.offsets.index((start, start + len(marker)))]
        assert tokenizer.decode([token], skip_special_tokens=False) == marker
