"""ReasoningSigner: the signature format, verification, garbage input, keys; and the Anthropic framer's use of it."""

from __future__ import annotations

import base64
import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from deltaflow import ReasoningSigner
from deltaflow.messages import DeltaMessage
from deltaflow.signing import SIGNATURE_PREFIX
from deltaflow.sinks import AnthropicFramer

SIGNER = ReasoningSigner(b"k" * 32)


def test_signature_format() -> None:
    """'dfs1.' then 43 urlsafe base64 characters (a 32-byte MAC, no padding): compact ASCII."""
    sig = SIGNER.sign("hello")
    assert sig.startswith(SIGNATURE_PREFIX) and SIGNATURE_PREFIX == "dfs1."
    token = sig[len(SIGNATURE_PREFIX) :]
    assert len(token) == 43 and "=" not in token and sig.isascii()
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert len(base64.urlsafe_b64decode(token + "=")) == 32


@given(st.text())
def test_sign_then_verify_round_trips_and_is_deterministic(text: str) -> None:
    """Any text (lone surrogates included) signs without error, verifies, and signs the same twice."""
    sig = SIGNER.sign(text)
    assert SIGNER.verify(text, sig) and SIGNER.sign(text) == sig


@given(st.text(), st.text(min_size=1))
def test_another_text_fails(text: str, extra: str) -> None:
    """A changed text does not verify."""
    assert not SIGNER.verify(text + extra, SIGNER.sign(text))


def test_tampered_signature_another_key_and_domain_fail() -> None:
    """One changed character, another key, or a bare HMAC of the text (no domain prefix) fails."""
    import hashlib
    import hmac

    sig = SIGNER.sign("thinking")
    token = sig[len(SIGNATURE_PREFIX) :]
    for i in (0, 20, len(token) - 1):
        flipped = token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]
        assert not SIGNER.verify("thinking", SIGNATURE_PREFIX + flipped)
    assert not ReasoningSigner(b"k" * 31).verify("thinking", sig)
    bare = base64.urlsafe_b64encode(hmac.new(b"k" * 32, b"thinking", hashlib.sha256).digest()).rstrip(b"=").decode()
    assert not SIGNER.verify("thinking", SIGNATURE_PREFIX + bare)


@pytest.mark.parametrize(
    "garbage",
    ["", "dfs1.", "dfs2." + "A" * 43, "A" * 48, "dfs1." + "!" * 43, "dfs1." + "A" * 42, "dfs1." + "A" * 44,
     "dfs1." + "é" * 43, "dfs1." + "A" * 40 + "===", None, 12, b"dfs1.xxx", ["dfs1."], "dfs1.\x00"],
)
def test_verify_never_raises_on_garbage(garbage: object) -> None:
    """A wrong prefix, bad base64, a wrong length or a non-str is False, never an exception."""
    assert SIGNER.verify("text", garbage) is False
    assert SIGNER.verify(garbage, SIGNER.sign("text")) is False


def test_non_canonical_base64_is_refused() -> None:
    """The 43rd character's unused low bits must be zero: exactly one string is the signature."""
    sig = SIGNER.sign("x")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(sig[-1])
    twin = sig[:-1] + alphabet[last | 1] if not last & 1 else sig[:-1] + alphabet[last & ~1]
    assert base64.urlsafe_b64decode(twin[5:] + "=") == base64.urlsafe_b64decode(sig[5:] + "=")
    assert not SIGNER.verify("x", twin)


def test_keys() -> None:
    """A str key is its UTF-8; an empty key is a ValueError; a wrong type a TypeError; repr hides the key."""
    assert ReasoningSigner("clé").sign("t") == ReasoningSigner("clé".encode()).sign("t")
    with pytest.raises(ValueError, match="signing key is empty"):
        ReasoningSigner("")
    with pytest.raises(ValueError, match="signing key is empty"):
        ReasoningSigner(b"")
    with pytest.raises(TypeError):
        ReasoningSigner(123)  # type: ignore[arg-type]
    assert "secret" not in repr(ReasoningSigner("secret"))
    with pytest.raises(TypeError):
        SIGNER.sign(b"bytes")  # type: ignore[arg-type]


def test_keyless_signers_share_one_random_process_key_and_warn_once() -> None:
    """key=None: one random key for the process (signers agree with each other, not with a fixed key); one warning."""
    from deltaflow import signing

    saved = signing._process_key
    signing._process_key = None
    try:
        with capture_logs() as logs:
            a, b = ReasoningSigner(), ReasoningSigner()
        assert a.verify("t", b.sign("t"))
        assert not ReasoningSigner(b"\x00" * 32).verify("t", a.sign("t"))
        warnings = [e for e in logs if e["log_level"] == "warning"]
        assert len(warnings) == 1
        assert warnings[0]["event"] == (
            "no signing key set: thinking signatures are per-process; replicas cannot verify each other's; "
            "set DELTAFLOW_SIGNING_KEY / --signing-key"
        )
        assert len(signing._process_key or b"") == 32
    finally:
        signing._process_key = saved


def _events(framer: AnthropicFramer, deltas: list[DeltaMessage]) -> list[dict[str, object]]:
    batches = [framer.start()] + [framer.feed(d) for d in deltas] + [framer.finish()]
    return [json.loads(msgspec.json.encode(ev.data)) for batch in batches for ev in batch]


def test_framer_signs_each_thinking_block_before_its_stop() -> None:
    """Two thinking blocks (thinking, text, thinking): each ends with its own signature_delta, then its stop; the message agrees."""
    framer = AnthropicFramer("m", signer=SIGNER)
    events = _events(
        framer,
        [DeltaMessage(reasoning_content="a"), DeltaMessage(reasoning_content="b"), DeltaMessage(content="x"),
         DeltaMessage(reasoning_content="c")],
    )
    sigs = [(i, e) for i, e in enumerate(events) if e.get("delta", {}).get("type") == "signature_delta"]  # type: ignore[union-attr]
    assert len(sigs) == 2
    for i, e in sigs:
        assert events[i + 1] == {"type": "content_block_stop", "index": e["index"]}
    assert sigs[0][1]["delta"] == {"type": "signature_delta", "signature": SIGNER.sign("ab")}
    assert sigs[1][1]["delta"] == {"type": "signature_delta", "signature": SIGNER.sign("c")}
    text_stop = next(e for e in events if e == {"type": "content_block_stop", "index": 1})
    assert events[events.index(text_stop) - 1]["delta"]["type"] == "text_delta"  # type: ignore[index]
    content = framer.message()["content"]
    assert content == [
        {"type": "thinking", "thinking": "ab", "signature": SIGNER.sign("ab")},
        {"type": "text", "text": "x"},
        {"type": "thinking", "thinking": "c", "signature": SIGNER.sign("c")},
    ]
