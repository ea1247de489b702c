"""Tiny random-weight GGUF models that carry a real family's tokenizer.

A llama.cpp server needs a model file to start. These are written at test time
(never committed: 38-64 MB each, almost all of it the embedding and the output
head over the real vocabulary) from the tokenizers in ``../shared/tokenizers``:

* architecture ``qwen3`` for Qwen3, ``llama`` for the others (DeepSeek-V3's and
  gpt-oss's own architectures are MoE designs a tiny file gains nothing from;
  only the tokenizer matters here);
* 2 layers, hidden size 64, 4 attention heads over 2 KV heads, FFN 128, f16
  matrices (norm weights f32), random weights from a seeded generator, and a
  separate ``output.weight``: with the head tied to the embedding a random
  model repeats its last input token forever (``../shared/GATEWAY.md`` §3);
* the tokenizer: ``tokenizer.ggml.model = "gpt2"`` (byte-level BPE), the
  family's pre-tokenizer name (:data:`FAMILIES`), one token per id with its
  type (NORMAL for the BPE vocabulary, CONTROL for added tokens flagged
  ``special``, USER_DEFINED for the other added tokens, UNUSED for ids no
  token holds), the merges, the bos/eos/pad ids, ``add_bos_token`` as the
  family's config (or its post-processor) says, and the chat template.

The same family, seed and template always give the same bytes.
"""

from __future__ import annotations

import gzip
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy comes with gguf; imported when a model is written, so this module imports without it
    import numpy as np

__all__ = ("FAMILIES", "Family", "load_tokenizer_json", "write_tiny_gguf")

N_LAYERS = 2
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
CONTEXT_LENGTH = 8192
RMS_EPS = 1e-6
ROPE_FREQ_BASE = 1_000_000.0
WEIGHT_STD = 0.02


@dataclass(frozen=True)
class Family:
    """How one model family's tokenizer is written into a GGUF.

    Attributes:
        tokenizer_dir: the folder under ``shared/tokenizers``.
        arch: the GGUF architecture of the tiny model.
        pre: ``tokenizer.ggml.pre``, llama.cpp's name for the pre-tokenizer regexes.
        bos: the bos token's text (None: no bos id is written).
        eos: the eos token's text.
        pad: the pad token's text (None: no pad id is written).
    """

    tokenizer_dir: str
    arch: str
    pre: str
    bos: str | None
    eos: str
    pad: str | None


FAMILIES: Mapping[str, Family] = {
    # Qwen3's config has no bos; released Qwen3 GGUFs give <|endoftext|> as bos (with add_bos false) and pad.
    "qwen3": Family("qwen3", "qwen3", "qwen2", "<|endoftext|>", "<|im_end|>", "<|endoftext|>"),
    # Llama 3.2 Instruct: eos is the end of turn; the config names no pad token.
    "llama3": Family("llama3", "llama", "llama-bpe", "<|begin_of_text|>", "<|eot_id|>", None),
    "deepseek-v3": Family(
        "deepseek-v3", "llama", "deepseek-v3", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
    ),
    "gpt-oss": Family("gpt-oss", "llama", "gpt-4o", "<|startoftext|>", "<|return|>", "<|endoftext|>"),
}


def load_tokenizer_json(shared: Path, family: str) -> dict[str, Any]:
    """The family's ``tokenizer.json`` (gunzipped) as a dict."""
    path = shared / "tokenizers" / FAMILIES[family].tokenizer_dir / "tokenizer.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def _load_config(shared: Path, family: str) -> dict[str, Any]:
    """The family's ``tokenizer_config.json``, or ``{}`` when it has none."""
    path = shared / "tokenizers" / FAMILIES[family].tokenizer_dir / "tokenizer_config.json"
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _post_processor_adds_bos(post: Any, bos: str | None) -> bool:
    """Whether a ``tokenizer.json`` post-processor puts ``bos`` in front of a single sequence."""
    if not isinstance(post, Mapping) or bos is None:
        return False
    if post.get("type") == "Sequence":
        return any(_post_processor_adds_bos(p, bos) for p in post.get("processors", ()))
    if post.get("type") != "TemplateProcessing":
        return False
    single = post.get("single") or []
    first = single[0] if single else {}
    return isinstance(first, Mapping) and first.get("SpecialToken", {}).get("id") == bos


def _vocabulary(tok: Mapping[str, Any]) -> tuple[list[str], list[int]]:
    """Token texts and GGUF token types indexed by id; added tokens take precedence over the BPE vocabulary."""
    import gguf

    vocab: Mapping[str, int] = tok["model"]["vocab"]
    added: Sequence[Mapping[str, Any]] = tok.get("added_tokens", ())
    size = 1 + max([*vocab.values(), *(a["id"] for a in added)])
    texts: list[str | None] = [None] * size
    types = [int(gguf.TokenType.UNUSED)] * size
    for text, tid in vocab.items():
        texts[tid] = text
        types[tid] = int(gguf.TokenType.NORMAL)
    for a in added:
        texts[a["id"]] = a["content"]
        types[a["id"]] = int(gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED)
    # A hole gets a unique placeholder text, as llama.cpp's converter writes them.
    filled = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(texts)]
    return filled, types


def _merges(tok: Mapping[str, Any]) -> list[str]:
    """The BPE merges as ``"left right"`` strings (tokenizer.json holds either form)."""
    return [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]


def _token_id(texts: Sequence[str], text: str | None) -> int | None:
    """The id of ``text`` among the token texts (the last holder wins, as added tokens do), or None."""
    if text is None:
        return None
    for i in range(len(texts) - 1, -1, -1):
        if texts[i] == text:
            return i
    raise KeyError(f"token {text!r} is not in the vocabulary")


def _writer_class() -> type[Any]:
    """``gguf.GGUFWriter`` with a fast path for the long metadata arrays (tokens, types, merges).

    The stock writer packs an array element by element through generic code
    (about 3 s for 150k tokens and 150k merges); this packs homogeneous
    ``str`` and ``int`` lists in one pass into the same bytes (GGUF: item type
    u32, count u64, then each string as u64 length + UTF-8, or each int32),
    and leaves every other value to the stock code.
    """
    import gguf
    import numpy as np

    class FastArrayWriter(gguf.GGUFWriter):
        def _pack_val(self, val: Any, vtype: Any, add_vtype: bool, sub_type: Any = None) -> bytes:
            little = self.endianess == gguf.GGUFEndian.LITTLE
            if not (vtype == gguf.GGUFValueType.ARRAY and sub_type is None and little and isinstance(val, list)):
                return bytes(super()._pack_val(val, vtype, add_vtype, sub_type))
            head = struct.pack("<I", vtype) if add_vtype else b""
            if val and all(type(v) is str for v in val):
                parts = [head, struct.pack("<IQ", gguf.GGUFValueType.STRING, len(val))]
                for v in val:
                    enc = v.encode("utf-8")
                    parts.append(struct.pack("<Q", len(enc)))
                    parts.append(enc)
                return b"".join(parts)
            if val and all(type(v) is int for v in val):
                body = np.asarray(val, dtype="<i4").tobytes()
                return head + struct.pack("<IQ", gguf.GGUFValueType.INT32, len(val)) + body
            return bytes(super()._pack_val(val, vtype, add_vtype, sub_type))

    return FastArrayWriter


def _add_weights(writer: Any, arch: str, n_vocab: int, rng: np.random.Generator) -> None:
    """Random f16 matrices (f32 norms) of a 2-layer model, with an untied output head."""
    import numpy as np

    head_dim = N_EMBD // N_HEAD

    def mat(rows: int, cols: int) -> np.ndarray[Any, np.dtype[np.float16]]:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * WEIGHT_STD).astype(np.float16)

    def ones(n: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        return np.ones(n, dtype=np.float32)

    writer.add_tensor("token_embd.weight", mat(n_vocab, N_EMBD))
    for i in range(N_LAYERS):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", ones(N_EMBD))
        writer.add_tensor(f"{blk}.attn_q.weight", mat(N_HEAD * head_dim, N_EMBD))
        writer.add_tensor(f"{blk}.attn_k.weight", mat(N_HEAD_KV * head_dim, N_EMBD))
        writer.add_tensor(f"{blk}.attn_v.weight", mat(N_HEAD_KV * head_dim, N_EMBD))
        writer.add_tensor(f"{blk}.attn_output.weight", mat(N_EMBD, N_HEAD * head_dim))
        if arch == "qwen3":
            writer.add_tensor(f"{blk}.attn_q_norm.weight", ones(head_dim))
            writer.add_tensor(f"{blk}.attn_k_norm.weight", ones(head_dim))
        writer.add_tensor(f"{blk}.ffn_norm.weight", ones(N_EMBD))
        writer.add_tensor(f"{blk}.ffn_gate.weight", mat(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_up.weight", mat(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_down.weight", mat(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", ones(N_EMBD))
    writer.add_tensor("output.weight", mat(n_vocab, N_EMBD))


def write_tiny_gguf(
    family: str,
    path: Path,
    *,
    chat_template: str | None = None,
    seed: int = 0,
    shared: Path | None = None,
) -> Path:
    """Write a tiny random-weight GGUF model with ``family``'s real tokenizer.

    Args:
        family: a key of :data:`FAMILIES` (``qwen3``, ``llama3``, ``deepseek-v3``, ``gpt-oss``).
        path: the file to write (its folder must exist).
        chat_template: the template to embed; None: the family's
            ``tokenizer_config.json`` template (none for gpt-oss, whose config has none).
        seed: seeds the weights; the same arguments always write the same bytes.
        shared: the ``shared/`` folder; None: :func:`deltaflow.testing.shared_dir`.

    Returns:
        ``path``.

    Raises:
        KeyError: an unknown family.
        FileNotFoundError: ``shared/`` or the family's tokenizer is absent.
    """
    import gguf
    import numpy as np

    spec = FAMILIES[family]
    if shared is None:
        from deltaflow.testing import shared_dir

        shared = shared_dir()
        if shared is None:
            raise FileNotFoundError("../shared (the tokenizers) is not beside this checkout")
    tok = load_tokenizer_json(shared, family)
    config = _load_config(shared, family)
    texts, types = _vocabulary(tok)
    if chat_template is None:
        template = config.get("chat_template")
        chat_template = template if isinstance(template, str) else None
    add_bos = config.get("add_bos_token")
    if not isinstance(add_bos, bool):
        add_bos = _post_processor_adds_bos(tok.get("post_processor"), spec.bos)
    add_eos = config.get("add_eos_token")

    writer = _writer_class()(str(path), spec.arch)
    writer.add_name(f"tiny-random-{family}")
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYERS)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_key_length(N_EMBD // N_HEAD)
    writer.add_value_length(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_vocab_size(len(texts))

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(spec.pre)
    writer.add_token_list(texts)
    writer.add_token_types(types)
    writer.add_token_merges(_merges(tok))
    bos_id = _token_id(texts, spec.bos)
    eos_id = _token_id(texts, spec.eos)
    pad_id = _token_id(texts, spec.pad)
    if bos_id is not None:
        writer.add_bos_token_id(bos_id)
    if eos_id is not None:
        writer.add_eos_token_id(eos_id)
    if pad_id is not None:
        writer.add_pad_token_id(pad_id)
    writer.add_add_bos_token(add_bos)
    if isinstance(add_eos, bool):
        writer.add_add_eos_token(add_eos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    _add_weights(writer, spec.arch, len(texts), np.random.default_rng(seed))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
