"""Detokenizer stage: token ids -> text with real tokenizers (HF tokenizers and tiktoken), metadata carried along."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from deltaflow import StateError, TokenChunk
from deltaflow.items import ChunkEnd
from deltaflow.stages.detokenize import Detokenizer, make_decoder
from deltaflow.testing import load_tokenizer

# Text whose CJK, emoji (with ZWJ sequences) and astral characters span several byte-level tokens.
MULTI_BYTE = "天気は晴れ 🌧️🦜 Ünïcödé 𝔘 龘 👨‍👩‍👧‍👦 終わり"
HF_FAMILIES = ["qwen3", "llama3", "deepseek-v3"]


def hf(shared: Path, family: str) -> Any:
    """A real HF tokenizer from shared/tokenizers (cached)."""
    tok = load_tokenizer(family)
    assert tok is not None, f"{shared}/tokenizers/{family} is missing"
    return tok


@pytest.fixture(scope="module")
def o200k(shared: Path) -> Any:
    """o200k_harmony loaded offline from shared/tokenizers/gpt-oss (the tokenizers README recipe)."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    d = shared / "tokenizers" / "gpt-oss"
    meta = json.loads((d / "o200k_harmony.json").read_text(encoding="utf-8"))
    ranks = load_tiktoken_bpe(
        os.fspath(d / "o200k_base.tiktoken"),
        expected_hash="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    )
    return tiktoken.Encoding(
        "o200k_harmony", pat_str=meta["pat_str"], mergeable_ranks=ranks, special_tokens=meta["special_tokens"]
    )


@pytest.fixture(scope="module")
def cl100k(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """cl100k_base through tiktoken.get_encoding, offline via TIKTOKEN_CACHE_DIR (the README's cache name)."""
    import tiktoken

    cache = tmp_path_factory.mktemp("tiktoken-cache")
    (cache / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4").write_bytes(
        (shared / "tokenizers" / "cl100k" / "cl100k_base.tiktoken").read_bytes()
    )
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        return tiktoken.get_encoding("cl100k_base")
    finally:
        if old is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old


def run(det: Detokenizer, chunks: list[TokenChunk]) -> tuple[list[str], list[ChunkEnd]]:
    """Feed chunks then finish; return the text pieces and the chunk ends, in order."""
    texts: list[str] = []
    ends: list[ChunkEnd] = []
    for c in chunks:
        for item in det.feed(c):
            if isinstance(item, str):
                texts.append(item)
            else:
                assert isinstance(item, ChunkEnd)
                ends.append(item)
    for item in det.finish():
        assert isinstance(item, str)
        texts.append(item)
    return texts, ends


def one_per_chunk(ids: list[int]) -> list[TokenChunk]:
    return [TokenChunk(token_ids=[i]) for i in ids]


def hf_ids(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_characters_split_across_tokens_are_emitted_once_whole(shared: Path, family: str) -> None:
    """A character whose bytes span several tokens comes out once, whole, when its last token arrives; never U+FFFD."""
    tok = hf(shared, family)
    ids = hf_ids(tok, MULTI_BYTE)
    # Precondition: some characters really span tokens (a token alone is not valid UTF-8).
    partial = [i for i in ids if "\ufffd" in tok.decode([i], skip_special_tokens=False)]
    assert len(partial) >= 3, f"{family}: no character of the sample spans tokens"
    texts, ends = run(Detokenizer(tok), one_per_chunk(ids))
    assert "".join(texts) == MULTI_BYTE
    assert not any("\ufffd" in t for t in texts)
    assert [e.token_ids for e in ends] == [[i] for i in ids]
    # A partial token adds no text yet; its chunk still ends, with 0 characters for it.
    assert any(e.token_chars == [0] for e in ends)
    assert sum(c for e in ends for c in (e.token_chars or [])) == len(MULTI_BYTE)


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_any_grouping_of_ids_gives_the_same_text(shared: Path, family: str) -> None:
    """Grouping ids into chunks of any size changes neither the text nor the per-token character counts."""
    tok = hf(shared, family)
    ids = hf_ids(tok, MULTI_BYTE * 3)
    for size in (1, 2, 3, 7, len(ids)):
        chunks = [TokenChunk(token_ids=ids[i : i + size]) for i in range(0, len(ids), size)]
        texts, ends = run(Detokenizer(tok), chunks)
        assert "".join(texts) == MULTI_BYTE * 3
        assert "\ufffd" not in "".join(texts)
        assert [i for e in ends for i in e.token_ids] == ids
        assert all(e.token_chars is not None and len(e.token_chars) == len(e.token_ids) for e in ends)


def test_qwen3_markers_are_single_tokens_and_reach_the_next_stage_as_text(shared: Path) -> None:
    """<think>, </think>, <tool_call>, </tool_call> are single Qwen3 tokens; each comes out as its own text."""
    tok = hf(shared, "qwen3")
    for marker in ("<think>", "</think>", "<tool_call>", "</tool_call>"):
        ids = hf_ids(tok, marker)
        assert len(ids) == 1, f"{marker} is not one token"
        texts, ends = run(Detokenizer(tok), one_per_chunk(ids))
        assert texts == [marker]
        assert ends[0].token_chars == [len(marker)]


@pytest.mark.parametrize(
    ("family", "special"),
    [
        ("qwen3", "<|im_end|>"),
        ("qwen3", "<|endoftext|>"),
        ("llama3", "<|eot_id|>"),
        ("llama3", "<|eom_id|>"),
        ("deepseek-v3", "<｜end▁of▁sentence｜>"),
    ],
)
def test_other_special_tokens_are_dropped_from_text_but_keep_their_ids(shared: Path, family: str, special: str) -> None:
    """End-of-turn and padding specials add no text; their ids stay in the chunk end."""
    tok = hf(shared, family)
    sid = tok.token_to_id(special)
    assert sid is not None
    ids = [*hf_ids(tok, "Hi 天気"), sid]
    texts, ends = run(Detokenizer(tok), [TokenChunk(token_ids=ids, logprobs=[-1.0] * len(ids))])
    assert "".join(texts) == "Hi 天気"
    assert ends == [ChunkEnd(token_ids=ids, logprobs=[-1.0] * len(ids), token_chars=ends[0].token_chars)]
    assert ends[0].token_chars is not None and ends[0].token_chars[-1] == 0


def test_a_special_marker_is_kept_only_when_declared(shared: Path) -> None:
    """Llama 3's <|python_tag|> is a special token: dropped by default, kept as text when listed in keep."""
    tok = hf(shared, "llama3")
    tag = tok.token_to_id("<|python_tag|>")
    ids = [tag, *hf_ids(tok, '{"name": "f"}'), tok.token_to_id("<|eom_id|>")]
    assert "".join(run(Detokenizer(tok), one_per_chunk(ids))[0]) == '{"name": "f"}'
    kept, _ = run(Detokenizer(tok, keep=["<|python_tag|>"]), one_per_chunk(ids))
    assert "".join(kept) == '<|python_tag|>{"name": "f"}'


def test_tiktoken_o200k_harmony_decodes_split_characters_and_drops_specials(o200k: Any) -> None:
    """With tiktoken o200k_harmony, split characters come out whole and specials not kept are dropped."""
    enc = o200k
    ids = enc.encode(MULTI_BYTE)
    assert sum(_invalid(enc, i) for i in ids) >= 3
    start, end = enc.encode_single_token("<|start|>"), enc.encode_single_token("<|end|>")
    texts, ends = run(Detokenizer(enc), one_per_chunk([start, *ids, end]))
    assert "".join(texts) == MULTI_BYTE
    assert not any("\ufffd" in t for t in texts)
    assert [i for e in ends for i in e.token_ids] == [start, *ids, end]
    kept, _ = run(Detokenizer(enc, keep=["<|start|>"]), one_per_chunk([start, *ids, end]))
    assert "".join(kept) == "<|start|>" + MULTI_BYTE


def _invalid(enc: Any, token_id: int) -> bool:
    try:
        enc.decode_single_token_bytes(token_id).decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_tiktoken_cl100k_decodes_split_characters(cl100k: Any) -> None:
    """cl100k_base (loaded offline by tiktoken.get_encoding) decodes split characters whole; drops <|endoftext|>."""
    ids = cl100k.encode(MULTI_BYTE)
    assert sum(_invalid(cl100k, i) for i in ids) >= 3
    eot = cl100k.encode_single_token("<|endoftext|>")
    for size in (1, 2, 5):
        all_ids = [*ids, eot]
        chunks = [TokenChunk(token_ids=all_ids[i : i + size]) for i in range(0, len(all_ids), size)]
        texts, ends = run(Detokenizer(cl100k), chunks)
        assert "".join(texts) == MULTI_BYTE
        assert "\ufffd" not in "".join(texts)
        assert [i for e in ends for i in e.token_ids] == all_ids


@pytest.mark.parametrize("family", ["qwen3", "tiktoken-o200k"])
def test_a_long_stream_decodes_correctly(shared: Path, o200k: Any, family: str) -> None:
    """About 200k tokens decode, chunk by chunk, to exactly the encoded text (timing is left to benchmarks)."""
    line = 'Line of text: 天気は晴れ 🌧️ naïve x<y {"k": [1, 2]}\n'
    text = line * 8000
    tok: Any = hf(shared, "qwen3") if family == "qwen3" else o200k
    ids = hf_ids(tok, text) if family == "qwen3" else tok.encode(text)
    assert len(ids) >= 200_000
    det = Detokenizer(tok)
    out: list[str] = []
    n_ids = 0
    for i in range(0, len(ids), 16):
        for item in det.feed(TokenChunk(token_ids=ids[i : i + 16])):
            if isinstance(item, str):
                out.append(item)
            else:
                assert isinstance(item, ChunkEnd)
                n_ids += len(item.token_ids)
    out += [t for t in det.finish() if isinstance(t, str)]
    assert "".join(out) == text
    assert n_ids == len(ids)


def test_text_chunks_pass_through_without_a_tokenizer() -> None:
    """A chunk that carries text is not decoded; its metadata goes to the chunk end."""
    det = Detokenizer(None)
    chunk = TokenChunk(token_ids=[5, 6], text="hé", logprobs=[0.1, 0.2], finish_reason="stop")
    assert det.feed(chunk) == ["hé", ChunkEnd(token_ids=[5, 6], logprobs=[0.1, 0.2], finish_reason="stop")]
    assert det.feed(TokenChunk(finish_reason="length")) == [ChunkEnd(finish_reason="length")]
    assert det.feed("already text") == ["already text"]
    assert det.finish() == []


def test_ids_without_a_tokenizer_raise_value_error_naming_tokenizer() -> None:
    """Token ids with no text and no tokenizer raise ValueError that says to pass tokenizer=."""
    with pytest.raises(ValueError, match="tokenizer="):
        Detokenizer(None).feed(TokenChunk(token_ids=[1, 2]))


@pytest.mark.parametrize("bad", [object(), "qwen3", 42])
def test_unsupported_tokenizer_raises_type_error_naming_supported_kinds(bad: object) -> None:
    """An unsupported tokenizer is a TypeError that lists the supported kinds."""
    with pytest.raises(TypeError) as info:
        Detokenizer(bad)
    msg = str(info.value)
    assert type(bad).__name__ in msg
    for kind in ("tokenizers.Tokenizer", "tiktoken.Encoding", "transformers fast tokenizer"):
        assert kind in msg
    with pytest.raises(TypeError):
        make_decoder(bad)


def test_an_object_with_a_backend_tokenizer_is_decoded_through_it(shared: Path) -> None:
    """A transformers-style fast tokenizer (``backend_tokenizer`` holding a tokenizers.Tokenizer) is accepted."""
    tok = hf(shared, "qwen3")

    class FastTokenizerLike:
        backend_tokenizer = tok

    ids = hf_ids(tok, MULTI_BYTE)
    texts, _ = run(Detokenizer(FastTokenizerLike()), one_per_chunk(ids))
    assert "".join(texts) == MULTI_BYTE


def test_finish_twice_is_a_state_error(shared: Path) -> None:
    """finish() may be called once."""
    det = Detokenizer(hf(shared, "qwen3"))
    det.finish()
    with pytest.raises(StateError):
        det.finish()


def test_each_response_gets_a_fresh_decoder(shared: Path) -> None:
    """Two Detokenizers over one tokenizer do not share the incremental state of a split character."""
    tok = hf(shared, "qwen3")
    ids = hf_ids(tok, "🦜")
    assert len(ids) >= 2
    a, b = Detokenizer(tok), Detokenizer(tok)
    assert a.feed(TokenChunk(token_ids=ids[:1])) == [ChunkEnd(token_ids=ids[:1], token_chars=[0])]
    assert run(b, one_per_chunk(hf_ids(tok, "ok")))[0] == ["ok"]
    assert a.feed(TokenChunk(token_ids=ids[1:]))[0] == "🦜"


def test_a_special_token_added_after_a_decoder_was_made_is_dropped_by_the_next(shared: Path) -> None:
    """The special ids are found once per tokenizer (a server makes a decoder per response), but a token
    added to the tokenizer later is known to the next decoder."""
    import gzip

    from tokenizers import AddedToken, Tokenizer

    with gzip.open(shared / "tokenizers" / "qwen3" / "tokenizer.json.gz", "rt", encoding="utf-8") as f:
        tok = Tokenizer.from_str(f.read())  # a copy of its own: the test adds a token to it
    ids = hf_ids(tok, "Hi")
    assert "".join(run(Detokenizer(tok), one_per_chunk(ids))[0]) == "Hi"
    tok.add_special_tokens([AddedToken("<|probe|>", special=True)])
    probe = tok.token_to_id("<|probe|>")
    assert probe is not None
    texts, _ = run(Detokenizer(tok), one_per_chunk([*ids, probe]))
    assert "".join(texts) == "Hi"
    kept, _ = run(Detokenizer(tok, keep=["<|probe|>"]), one_per_chunk([*ids, probe]))
    assert "".join(kept) == "Hi<|probe|>"
