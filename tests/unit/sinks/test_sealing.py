"""ReasoningSealer (Responses encrypted_content): round trips, tampering, other keys, expiry, garbage, key hygiene;
and the Responses framer's encrypted_content."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from deltaflow.messages import DeltaMessage
from deltaflow.signing import SEAL_PREFIX, SIGNATURE_PREFIX, ReasoningSealer, ReasoningSigner
from deltaflow.sinks import ResponsesFramer

KEY = b"s" * 32
SEALER = ReasoningSealer(KEY)


def test_seal_format() -> None:
    """'dfe1.' then a Fernet token: compact urlsafe ASCII, distinct from a signature's prefix."""
    token = SEALER.seal("thinking")
    assert token.startswith(SEAL_PREFIX) and SEAL_PREFIX == "dfe1." and SEAL_PREFIX != SIGNATURE_PREFIX
    assert token.isascii() and set(token[len(SEAL_PREFIX):]) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")


@given(st.text())
def test_seal_then_open_round_trips(text: str) -> None:
    """Any text (lone surrogates included) seals and opens to itself."""
    assert SEALER.open(SEALER.seal(text)) == text


def test_each_seal_is_fresh_and_opens() -> None:
    a, b = SEALER.seal("x"), SEALER.seal("x")
    assert a != b and SEALER.open(a) == SEALER.open(b) == "x"


def test_tampered_truncated_and_other_key_seals_do_not_open() -> None:
    token = SEALER.seal("the model's own reasoning")
    body = token[len(SEAL_PREFIX):]
    for i in range(0, len(body), 7):
        flipped = body[:i] + ("A" if body[i] != "A" else "B") + body[i + 1:]
        assert SEALER.open(SEAL_PREFIX + flipped) is None, i
    assert SEALER.open(token[:-1]) is None and SEALER.open(token + "A") is None
    assert SEALER.open(body) is None  # the bare Fernet token: the prefix is part of the seal
    assert ReasoningSealer(b"s" * 31).open(token) is None
    assert ReasoningSealer(KEY.decode()).open(token) == "the model's own reasoning"  # str keys are their UTF-8


def test_the_sealing_key_is_derived_and_never_the_signing_key() -> None:
    """A Fernet keyed with the signing key's own bytes does not open a seal: the key comes from HKDF under a label."""
    body = SEALER.seal("t")[len(SEAL_PREFIX):].encode()
    with pytest.raises(InvalidToken):
        Fernet(base64.urlsafe_b64encode(KEY)).decrypt(body)
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"deltaflow.reasoning.seal.v1").derive(KEY)
    assert derived != KEY and Fernet(base64.urlsafe_b64encode(derived)).decrypt(body) == b"t"


def test_a_signer_and_its_sealer_share_the_key_material() -> None:
    token = ReasoningSealer.from_signer(ReasoningSigner(KEY)).seal("t")
    assert SEALER.open(token) == "t"
    keyless = ReasoningSealer.from_signer(ReasoningSigner())
    assert ReasoningSealer().open(keyless.seal("t")) == "t"  # both the per-process key
    assert SEALER.open(keyless.seal("t")) is None
    with pytest.raises(TypeError, match="signer must be a ReasoningSigner"):
        ReasoningSealer.from_signer(KEY)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "garbage",
    ["", "dfe1.", "dfe1.é", "dfe1." + "A" * 120, "dfe1.gAAAAA", "gAAAAABoXyZ" + "A" * 120, "dfs1." + "A" * 43,
     "dfe1.\x00", "dfe1.%%%%", None, 12, b"dfe1.xxx", ["dfe1."], {"t": 1}],
)
def test_open_never_raises_on_garbage(garbage: object) -> None:
    assert SEALER.open(garbage) is None


def test_expired_seals_do_not_open(monkeypatch: pytest.MonkeyPatch) -> None:
    import cryptography.fernet as fernet_module

    short = ReasoningSealer(KEY, ttl=60)
    token = short.seal("t")
    assert short.open(token) == "t" and SEALER.open(token) == "t"  # no ttl: never expires
    now = fernet_module.time.time()
    monkeypatch.setattr(fernet_module.time, "time", lambda: now + 120)
    assert short.open(token) is None and SEALER.open(token) == "t"


@pytest.mark.parametrize("ttl", [0, -1, True, 1.5, "60"])
def test_ttl_must_be_a_positive_integer(ttl: Any) -> None:
    with pytest.raises(ValueError, match="ttl must be a positive number of seconds"):
        ReasoningSealer(KEY, ttl=ttl)


def test_the_key_never_shows() -> None:
    """Not in repr/str, not in the errors of bad arguments, not in logs."""
    secret = "correct horse battery staple"
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=b"deltaflow.reasoning.seal.v1").derive(secret.encode())
    forms = [secret, secret.encode().hex(), base64.urlsafe_b64encode(derived).decode(), derived.hex(),
             base64.urlsafe_b64encode(derived[:16]).decode().rstrip("="), repr(derived)[2:-1]]
    with capture_logs() as logs:
        sealer = ReasoningSealer(secret, ttl=5)
        shown = [repr(sealer), str(sealer), repr(ReasoningSealer.from_signer(ReasoningSigner(secret)))]
        for call in (lambda: sealer.seal(b"bytes"), lambda: ReasoningSealer(secret, ttl=0),
                     lambda: ReasoningSealer(""), lambda: ReasoningSealer(12)):  # type: ignore[arg-type]
            with pytest.raises((TypeError, ValueError)) as exc:
                call()
            shown += [str(exc.value), repr(exc.value)]
        shown.append(repr(sealer.open(sealer.seal("x")[:-3])))
    shown += [repr(e) for e in logs]
    assert repr(sealer) == "ReasoningSealer(key=<hidden>, ttl=5)"
    assert not [(f, s) for f in forms for s in shown if f in s]


# -- the Responses framer ----------------------------------------------------------------------------


def _frame(framer: ResponsesFramer, deltas: list[DeltaMessage]) -> list[Any]:
    events = framer.start()
    for d in deltas:
        events += framer.feed(d)
    events += framer.finish()
    return [e.data for e in events]


TURN = [DeltaMessage(reasoning_content="first "), DeltaMessage(reasoning_content="thought"),
        DeltaMessage(content="Hello."), DeltaMessage(reasoning_content="second thought"),
        DeltaMessage(content="Bye.", finish_reason="stop")]


def test_reasoning_items_carry_their_sealed_text_when_asked() -> None:
    framer = ResponsesFramer("m", sealer=SEALER, include_encrypted=True)
    events = _frame(framer, TURN)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["reasoning", "message", "reasoning", "message"]
    assert [SEALER.open(i["encrypted_content"]) for i in done if i["type"] == "reasoning"] == [
        "first thought", "second thought"]
    assert all("encrypted_content" not in i for i in done if i["type"] == "message")
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert all("encrypted_content" not in i for i in added)  # not known before the item closes
    final = framer.response()["output"]
    assert final == done  # the non-streaming body: the same items, the same seals


@pytest.mark.parametrize(("sealer", "include"), [(SEALER, False), (None, True), (None, False)])
def test_no_encrypted_content_unless_asked_and_sealable(sealer: ReasoningSealer | None, include: bool) -> None:
    framer = ResponsesFramer("m", sealer=sealer, include_encrypted=include)
    _frame(framer, TURN)
    assert all("encrypted_content" not in i for i in framer.response()["output"])


def test_a_reasoning_item_cut_by_the_limit_is_sealed_too() -> None:
    framer = ResponsesFramer("m", sealer=SEALER, include_encrypted=True, reasoning_summary=True)
    _frame(framer, [DeltaMessage(reasoning_content="half a tho"), DeltaMessage(finish_reason="length")])
    (item,) = framer.response()["output"]
    assert item["status"] == "incomplete" and SEALER.open(item["encrypted_content"]) == "half a tho"
    assert item["summary"] == [{"type": "summary_text", "text": "half a tho"}]
