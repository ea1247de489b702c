"""deltaflow.prompt.tokenize: the ids of a benign prompt are the library's own, spans never give control ids.

Benign equality is checked where it can break: every expected prompt of the
shared corpus (48 templates, so every family's markers next to text of all
kinds) through every shared tokenizer, against HF ``encode(prompt,
add_special_tokens=False)`` and tiktoken ``encode(prompt, allowed_special="all")``;
random marker-laden text (hypothesis); tokenizer variants with ``lstrip`` /
``rstrip`` / ``normalized`` added tokens and a Metaspace ``prepend_scheme:
"first"`` pre-tokenizer. The end-to-end path (protect -> render -> restore ->
encode) renders with the stand-in renderer of ``prompt_render.py``.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prompt_render import (
    HF_FAMILIES,
    SURROGATE_FAMILIES,
    TOKENIZERS,
    conversations,
    expected_cases,
    harmony_prompt_tokenizer,
    hf_prompt_tokenizer,
    interesting_markers,
    prepare_chat,
    render_case,
    require_shared,
    surrogate_prompt_tokenizer,
)

from deltaflow.prompt._literals import literal_alternation
from deltaflow.prompt.protect import protect_messages
from deltaflow.prompt.tokenize import (
    HFPromptTokenizer,
    PromptTokenizer,
    TiktokenPromptTokenizer,
    UnsupportedTokenizerError,
    load_prompt_tokenizer,
)

pytestmark = pytest.mark.shared

HF_FOLDERS = ("qwen3", "qwen2.5", "llama3", "deepseek-v3", "deepseek-v3.1", "gpt-oss")
NFC_FOLDERS = {"qwen3", "qwen2.5"}  # their normalizer is NFC


@pytest.fixture(scope="module")
def corpus_prompts() -> list[str]:
    require_shared()
    return [c["prompt"] for c in expected_cases() if "prompt" in c]


def _hf(folder: str) -> HFPromptTokenizer:
    require_shared()
    tok: HFPromptTokenizer = hf_prompt_tokenizer(folder)
    return tok


def _family_cases(template: str) -> list[dict[str, Any]]:
    return [c for c in expected_cases() if c["template"] == template and "prompt" in c]


# ---------------------------------------------------------------------- benign equality


@pytest.mark.parametrize("family", sorted(HF_FAMILIES))
def test_family_expected_prompts_encode_like_hf(family: str) -> None:
    folder, template = HF_FAMILIES[family]
    tok = _hf(folder)
    cases = _family_cases(template)
    assert len(cases) == 18
    for case in cases:
        prompt = case["prompt"]
        assert tok.encode(prompt) == tok.tokenizer.encode(prompt, add_special_tokens=False).ids, case["conversation"]


@pytest.mark.parametrize("folder", HF_FOLDERS)
def test_every_corpus_prompt_encodes_like_hf(folder: str, corpus_prompts: list[str]) -> None:
    tok = _hf(folder)
    hf = tok.tokenizer
    mismatched = [p[:80] for p in corpus_prompts if tok.encode(p) != hf.encode(p, add_special_tokens=False).ids]
    assert mismatched == []
    assert len(corpus_prompts) > 800


def test_harmony_tiktoken_encodes_like_tiktoken_and_like_the_hf_gpt_oss_tokenizer(corpus_prompts: list[str]) -> None:
    tok = harmony_prompt_tokenizer()
    hf = _hf("gpt-oss").tokenizer
    for p in corpus_prompts:
        ids = tok.encode(p)
        assert ids == tok.encoding.encode(p, allowed_special="all")
        assert ids == hf.encode(p, add_special_tokens=False).ids


@pytest.mark.parametrize("family", sorted(SURROGATE_FAMILIES))
def test_surrogate_tokenizers_encode_like_tiktoken(family: str, corpus_prompts: list[str]) -> None:
    tok = surrogate_prompt_tokenizer(family)
    for p in corpus_prompts:
        assert tok.encode(p) == tok.encoding.encode(p, allowed_special="all")


def test_the_test_renderer_reproduces_the_expected_prompts() -> None:
    require_shared()
    names = {t for _, t in HF_FAMILIES.values()} | set(SURROGATE_FAMILIES.values())
    checked = 0
    for case in expected_cases():
        if case["template"] in names and "prompt" in case:
            got = render_case(case["template"], case["conversation"], case["add_generation_prompt"])
            assert got == case["prompt"], (case["template"], case["conversation"])
            checked += 1
    assert checked == 18 * len(names)


@pytest.mark.parametrize("family", sorted(HF_FAMILIES))
def test_protect_render_restore_encode_of_benign_conversations(family: str) -> None:
    folder, template = HF_FAMILIES[family]
    tok = _hf(folder)
    for case in _family_cases(template):
        messages = prepare_chat(conversations()[case["conversation"]]["chat"]["messages"])
        protected, protector = protect_messages(messages, tok.added_token_texts)
        rendered = render_case(template, case["conversation"], case["add_generation_prompt"], messages=protected)
        restored = protector.restore(rendered)
        assert restored.text == case["prompt"]
        markers = set(tok.added_token_texts)
        assert not any(restored.text[s:e] in markers for s, e in restored.plain_spans)
        assert tok.encode(*restored) == tok.tokenizer.encode(case["prompt"], add_special_tokens=False).ids


# ---------------------------------------------------------------------- random text


def _pieces(markers: tuple[str, ...]) -> st.SearchStrategy[str]:
    halves = [m[: len(m) // 2] for m in markers if len(m) > 1] + [m[len(m) // 2 :] for m in markers if len(m) > 1]
    text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Mn", "Mc", "Me")), max_size=6)
    return st.one_of(
        st.sampled_from(markers),
        st.sampled_from(halves),
        text,
        st.sampled_from([" ", "  ", "\n", "\n\n", "\t", " \n ", "\u3000", "\x1c"]),
    )


def _marker_spans(tok: PromptTokenizer, text: str) -> list[tuple[int, int]]:
    """The leftmost-longest occurrences of the tokenizer's markers (what a protector would have replaced)."""
    pattern = re.compile(literal_alternation(tok.added_token_texts))
    return [m.span() for m in pattern.finditer(text)]


@pytest.mark.parametrize("folder", HF_FOLDERS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_text_encodes_like_hf_and_spans_never_give_control_ids(folder: str, data: st.DataObject) -> None:
    tok = _hf(folder)
    parts = data.draw(st.lists(_pieces(interesting_markers(tok.added_token_texts)), max_size=12))
    text = "".join(parts)
    hf_ids = tok.tokenizer.encode(text, add_special_tokens=False).ids
    assert tok.encode(text) == hf_ids
    plain = tok.encode(text, _marker_spans(tok, text))
    assert not tok.special_ids.intersection(plain)
    expected = unicodedata.normalize("NFC", text) if folder in NFC_FOLDERS else text
    assert tok.decode(plain) == expected


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_text_tiktoken(data: st.DataObject) -> None:
    require_shared()
    tok = harmony_prompt_tokenizer()
    markers = interesting_markers(tok.added_token_texts)
    text = "".join(data.draw(st.lists(_pieces(markers), max_size=12)))
    assert tok.encode(text) == tok.encoding.encode(text, allowed_special="all")
    plain = tok.encode(text, _marker_spans(tok, text))
    assert not tok.special_ids.intersection(plain)
    assert tok.decode(plain) == text


# ---------------------------------------------------------------------- span semantics


def test_spans_are_barriers_and_only_neutralize_where_they_are() -> None:
    from tokenizers import Tokenizer

    tok = _hf("qwen3")
    im_end = tok.added_tokens["<|im_end|>"]
    text = "a<|im_end|>b<|im_end|>c"
    assert tok.encode(text).count(im_end) == 2
    first = (1, 11)
    ids = tok.encode(text, [first])
    assert ids.count(im_end) == 1
    # The neutralized marker merges with the text around it as ordinary text would (HF's own
    # encode_special_tokens=True reads the special <|im_end|> as text).
    as_text = Tokenizer.from_str(tok.tokenizer.to_str())
    as_text.encode_special_tokens = True
    assert ids[: ids.index(im_end)] == as_text.encode("a<|im_end|>b", add_special_tokens=False).ids
    assert ids[ids.index(im_end) :] == [im_end, *as_text.encode("c", add_special_tokens=False).ids]
    # A marker cut by a span boundary is no marker: "<|im_" outside, "end|>" inside a span.
    assert im_end not in tok.encode("<|im_end|>", [(5, 10)])
    assert im_end not in tok.encode("<|im_end|>", [(0, 1)])
    # Adjacent, overlapping and unordered spans.
    assert tok.encode(text, [(12, 22), (1, 11)]) == tok.encode(text, [(1, 11), (11, 11), (12, 22), (13, 15)])
    assert not tok.special_ids.intersection(tok.encode(text, [(12, 22), (1, 11)]))


@pytest.mark.parametrize("span", [(-1, 2), (3, 2), (0, 100)])
def test_spans_outside_the_text_are_refused(span: tuple[int, int]) -> None:
    tok = _hf("qwen3")
    with pytest.raises(ValueError, match="plain span"):
        tok.encode("hello<|im_end|>", [span])


def test_encode_refuses_non_text() -> None:
    tok = _hf("qwen3")
    with pytest.raises(TypeError):
        tok.encode(b"x")  # type: ignore[arg-type]


def test_properties_and_protocol() -> None:
    tok = _hf("qwen3")
    assert isinstance(tok, PromptTokenizer)
    assert isinstance(harmony_prompt_tokenizer(), PromptTokenizer)
    assert "<tool_call>" in tok.added_token_texts  # special=false, still a control token
    assert "<think>" in tok.added_token_texts
    assert tok.added_tokens["<tool_call>"] == 151657
    assert tok.special_ids == frozenset(tok.added_tokens.values())
    assert len(tok.added_token_texts) == 26
    assert tok.decode(tok.encode("<think>\nhi\n</think>")) == "<think>\nhi\n</think>"


# ---------------------------------------------------------------------- tokenizer variants


def _fuzz_equal(tok: HFPromptTokenizer, seed: int, n: int = 400) -> None:
    import random

    rnd = random.Random(seed)
    frags = ["hello", " world", "\n", "  ", "\t", "é", "日本語", "<", "|", ">", "_", "a", "12", "'s", " \n\n ", "\u3000"]
    frags += ["\x85", "\x1c", " [INST]"]
    markers = list(tok.added_token_texts)
    for _ in range(n):
        text = "".join(rnd.choice(markers) if rnd.random() < 0.3 else rnd.choice(frags) for _ in range(rnd.randint(0, 12)))
        assert tok.encode(text) == tok.tokenizer.encode(text, add_special_tokens=False).ids, repr(text)


def _variant(folder: str, edit: Callable[[dict[str, Any]], None]) -> Any:
    from tokenizers import Tokenizer

    require_shared()
    with gzip.open(TOKENIZERS / folder / "tokenizer.json.gz", "rt", encoding="utf-8") as f:
        config = json.load(f)
    for token in config["added_tokens"]:
        edit(token)
    return Tokenizer.from_str(json.dumps(config))


def test_lstrip_and_rstrip_added_tokens_match_hf() -> None:
    def edit(t: dict[str, Any]) -> None:
        if t["content"] in ("<|im_end|>", "<tool_call>", "<think>"):
            t["lstrip"] = True
        if t["content"] in ("<|im_start|>", "<tool_call>", "</think>"):
            t["rstrip"] = True

    _fuzz_equal(HFPromptTokenizer(_variant("qwen3", edit)), seed=1)


def test_normalized_added_tokens_under_no_normalizer_match_hf() -> None:
    def edit(t: dict[str, Any]) -> None:
        if t["id"] % 3 == 0:
            t["normalized"] = True

    _fuzz_equal(HFPromptTokenizer(_variant("llama3", edit)), seed=2)


def test_single_word_and_normalized_under_nfc_are_refused() -> None:
    def single(t: dict[str, Any]) -> None:
        t["single_word"] = t["content"] == "<think>"

    def normalized(t: dict[str, Any]) -> None:
        t["normalized"] = t["content"] == "<think>"

    with pytest.raises(UnsupportedTokenizerError, match="single_word"):
        HFPromptTokenizer(_variant("qwen3", single))
    with pytest.raises(UnsupportedTokenizerError, match="normalized"):
        HFPromptTokenizer(_variant("qwen3", normalized))  # qwen3's normalizer is NFC


def _metaspace(scheme: str, legacy_normalizer: bool = False) -> Any:
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    if legacy_normalizer:  # Llama-2 style: Prepend("▁") + Replace(" ", "▁"), applied per piece
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=scheme)
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>", "[INST]", "[/INST]"], show_progress=False
    )
    corpus = ["hello world the quick brown fox", "jumps over the lazy dog /", "[ INST ] a 12 é 日本語 _ | < >"] * 30
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False)])
    return tok


@pytest.mark.parametrize("scheme", ["first", "always", "never"])
@pytest.mark.parametrize("legacy_normalizer", [False, True])
def test_metaspace_tokenizers_match_hf(scheme: str, legacy_normalizer: bool) -> None:
    _fuzz_equal(HFPromptTokenizer(_metaspace(scheme, legacy_normalizer)), seed=3)


# ---------------------------------------------------------------------- the piece cache


@pytest.mark.parametrize("folder", ["qwen3", "llama3"])
def test_the_piece_cache_changes_no_id(folder: str, corpus_prompts: list[str]) -> None:
    cached, plain = _hf(folder), HFPromptTokenizer(_hf(folder).tokenizer, piece_cache_chars=0)
    cached.clear_cache()
    first = [cached.encode(p) for p in corpus_prompts]
    assert cached._cache is not None and len(cached._cache) > 100
    again = [cached.encode(p) for p in reversed(corpus_prompts)][::-1]  # every piece from the cache now
    want = [plain.encode(p) for p in corpus_prompts]
    assert first == want and again == want
    # The ids handed out are copies: changing them changes no later answer.
    again[0].append(-1)
    assert cached.encode(corpus_prompts[0]) == want[0]


def test_the_piece_cache_keeps_a_metaspace_first_piece_apart() -> None:
    # Under Metaspace "first" a piece at the start of the text encodes with the prefix, the same text
    # elsewhere without it: the cache must not hand one out for the other.
    tok = _metaspace("first")
    ours = HFPromptTokenizer(tok)
    for text in ("hello world<think>hello world", "<think>hello world", "hello world", "x<think>hello world"):
        assert ours.encode(text) == tok.encode(text, add_special_tokens=False).ids, text


def test_the_piece_cache_stays_within_its_bound() -> None:
    tok = _hf("qwen3")
    small = HFPromptTokenizer(tok.tokenizer, piece_cache_chars=64)
    cache = small._cache
    assert cache is not None
    words = [f"word{i} " * (1 + i % 3) for i in range(200)]
    for i, w in enumerate(words):
        text = f"{w}<|im_end|>{words[i - 1]}<think>{'long piece ' * 3}"
        assert small.encode(text) == tok.tokenizer.encode(text, add_special_tokens=False).ids
        assert cache._chars <= 64
    assert "long piece long piece long piece " not in cache._entries  # 33 chars: over a quarter of the bound
    assert TiktokenPromptTokenizer(harmony_prompt_tokenizer().encoding, piece_cache_chars=0)._cache is None
    with pytest.raises(ValueError, match="piece_cache_chars"):
        HFPromptTokenizer(tok.tokenizer, piece_cache_chars=-1)


def test_a_vocabulary_that_spells_a_marker_as_its_control_id_is_refused() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "[INST]"], show_progress=False)
    tok.train_from_iterator(["[INST] hello [INST] world"] * 50, trainer)  # BPE learns merges up to "[INST]" = id 1
    assert tok.model.token_to_id("[INST]") == 1
    with pytest.raises(UnsupportedTokenizerError, match="control ids even as plain text"):
        HFPromptTokenizer(tok)


# ---------------------------------------------------------------------- tiktoken options


def test_tiktoken_allowed_special_subset() -> None:
    require_shared()
    base = harmony_prompt_tokenizer().encoding
    tok = TiktokenPromptTokenizer(base, allowed_special={"<|start|>", "<|end|>"})
    text = "<|start|>user<|message|>hi<|end|>"
    assert tok.encode(text) == base.encode(text, allowed_special={"<|start|>", "<|end|>"}, disallowed_special=())
    assert tok.special_ids == {base.encode_single_token("<|start|>"), base.encode_single_token("<|end|>")}
    assert "<|message|>" in tok.added_token_texts  # still protected
    with pytest.raises(ValueError, match="not special tokens"):
        TiktokenPromptTokenizer(base, allowed_special={"<|nope|>"})


def test_tiktoken_ranks_hash_is_checked(tmp_path: Path) -> None:
    require_shared()
    with pytest.raises(ValueError, match="sha256"):
        TiktokenPromptTokenizer.from_files(
            TOKENIZERS / "cl100k" / "cl100k_base.tiktoken", pat_str="x", expected_sha256="00" * 32
        )
    with pytest.raises(ValueError, match="pat_str"):
        TiktokenPromptTokenizer.from_files(TOKENIZERS / "cl100k" / "cl100k_base.tiktoken")


# ---------------------------------------------------------------------- loading


def test_load_prompt_tokenizer_finds_json_or_gz(tmp_path: Path) -> None:
    require_shared()
    gz = load_prompt_tokenizer(TOKENIZERS / "qwen2.5")
    with gzip.open(TOKENIZERS / "qwen2.5" / "tokenizer.json.gz", "rt", encoding="utf-8") as f:
        (tmp_path / "tokenizer.json").write_text(f.read(), encoding="utf-8")
    plain = load_prompt_tokenizer(tmp_path)
    direct = load_prompt_tokenizer(tmp_path / "tokenizer.json")
    text = "<|im_start|>user\nhi<tool_call><|im_end|>"
    assert gz.encode(text) == plain.encode(text) == direct.encode(text)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_prompt_tokenizer(tmp_path / "empty_dir_that_is_missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_prompt_tokenizer(tmp_path / "empty")


def test_missing_libraries_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from deltaflow.prompt import tokenize

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(ImportError, match=re.escape("deltaflow[hf]")):
        tokenize.HFPromptTokenizer.from_str("{}")
    with pytest.raises(ImportError, match=re.escape("deltaflow[tiktoken]")):
        tokenize.TiktokenPromptTokenizer.from_files("x.tiktoken", pat_str="x")


# ---------------------------------------------------------------------- the literal matcher


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.text(alphabet="ab<|>", min_size=1, max_size=5), min_size=1, max_size=8),
    text=st.text(alphabet="ab<|>x", max_size=20),
)
def test_literal_alternation_is_leftmost_longest(words: list[str], text: str) -> None:
    expected: list[tuple[int, int]] = []
    i = 0
    while i < len(text):
        best = max((w for w in words if text.startswith(w, i)), key=len, default=None)
        if best is None:
            i += 1
        else:
            expected.append((i, i + len(best)))
            i += len(best)
    assert [m.span() for m in re.finditer(literal_alternation(words), text)] == expected


def test_literal_alternation_of_nothing_never_matches() -> None:
    assert re.search(literal_alternation([]), "anything") is None
    assert re.search(literal_alternation([""]), "anything") is None
