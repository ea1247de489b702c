"""Signed and sealed reasoning: what a client sends back is checked to be what deltaflow produced.

Signatures (stdlib only: ``hmac``, ``hashlib``, ``secrets``, ``base64``).
Anthropic clients send a response's ``thinking`` blocks back in the next
request with their ``signature``, and a server checks that the text is the
one it produced. :class:`ReasoningSigner` makes and checks such signatures:
an HMAC-SHA256, under a secret key, over a domain-separation prefix and the
UTF-8 of the block's text, written as a compact ASCII token::

    dfs1.<urlsafe base64 of the 32-byte MAC, without padding>

(``dfs1`` names the scheme and its version, so a later scheme can be told
apart). Replicas that share a key verify each other's signatures; a signer
without a key uses a random key made once per process, which no other
process can verify (a warning says so once).

Seals (:class:`ReasoningSealer`, needs ``cryptography``, imported only when a
sealer is made). OpenAI Responses clients that ask ``include:
["reasoning.encrypted_content"]`` get each reasoning item's text sealed in
its ``encrypted_content``, and send it back instead of (or beside) the text:
the text is encrypted and authenticated with Fernet (AES-128-CBC and
HMAC-SHA256) and written as::

    dfe1.<the Fernet token>

The Fernet key is derived from the signing key with HKDF-SHA256 under a
label of its own, so it never equals the bytes the signatures are made
with, and a key that signs also seals (replicas with one key open each
other's seals; a keyless sealer uses the per-process key). A Fernet token
shows its creation time and, roughly, the text's length; nothing else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

__all__ = ("SEAL_PREFIX", "SIGNATURE_PREFIX", "ReasoningSealer", "ReasoningSigner")

SIGNATURE_PREFIX = "dfs1."
"""The version prefix of every signature this module makes."""

SEAL_PREFIX = "dfe1."
"""The version prefix of every seal :class:`ReasoningSealer` makes."""

_DOMAIN = b"deltaflow.thinking.v1\x00"
_SEAL_LABEL = b"deltaflow.reasoning.seal.v1"
_MAC_BYTES = hashlib.sha256().digest_size
_TOKEN_CHARS = len(base64.urlsafe_b64encode(bytes(_MAC_BYTES)).rstrip(b"="))
_log = structlog.get_logger("deltaflow.signing")
_process_key: bytes | None = None
_process_key_lock = threading.Lock()


def _per_process_key() -> bytes:
    """The random key shared by every keyless signer of this process (made, and warned about, once)."""
    global _process_key
    with _process_key_lock:
        if _process_key is None:
            _process_key = secrets.token_bytes(32)
            _log.warning(
                "no signing key set: thinking signatures are per-process; replicas cannot verify "
                "each other's; set DELTAFLOW_SIGNING_KEY / --signing-key"
            )
        return _process_key


def _key_bytes(key: bytes | str | None) -> bytes:
    """The raw bytes of a signing key (None: the per-process key).

    Raises:
        ValueError: ``key`` is empty.
        TypeError: ``key`` is not ``bytes``, ``str`` or None.
    """
    if key is None:
        return _per_process_key()
    if isinstance(key, str):
        raw = key.encode("utf-8")
    elif isinstance(key, (bytes, bytearray)):
        raw = bytes(key)
    else:
        raise TypeError(f"the signing key must be bytes, str or None, got {type(key).__name__}")
    if not raw:
        raise ValueError("the signing key is empty: pass a non-empty key, or None for a per-process random key")
    return raw


def _utf8(text: str) -> bytes:
    # surrogatepass: model text may hold lone surrogates; signing must never fail on them.
    return text.encode("utf-8", "surrogatepass")


class ReasoningSigner:
    """Signs and verifies the text of thinking blocks with HMAC-SHA256.

    Args:
        key: the secret key (a ``str`` is UTF-8 encoded). None: a random key
            made once per process with :func:`secrets.token_bytes` (logged as
            a warning once: other processes cannot verify its signatures).

    Raises:
        ValueError: ``key`` is empty.
        TypeError: ``key`` is not ``bytes``, ``str`` or None.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes | str | None = None) -> None:
        self._key = _key_bytes(key)

    def __repr__(self) -> str:
        return "ReasoningSigner(key=<hidden>)"

    def _mac(self, text: str) -> bytes:
        return hmac.new(self._key, _DOMAIN + _utf8(text), hashlib.sha256).digest()

    def sign(self, text: str) -> str:
        """The signature of ``text``: ``"dfs1."`` and the urlsafe base64 (no padding) of its MAC.

        Raises:
            TypeError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return SIGNATURE_PREFIX + base64.urlsafe_b64encode(self._mac(text)).rstrip(b"=").decode("ascii")

    def verify(self, text: object, signature: object) -> bool:
        """Whether ``signature`` is this signer's signature of ``text`` (constant-time comparison).

        Never raises: a non-str argument, a wrong prefix, bad base64 or a
        wrong length is simply False.
        """
        if not isinstance(text, str) or not isinstance(signature, str):
            return False
        if not signature.startswith(SIGNATURE_PREFIX):
            return False
        token = signature[len(SIGNATURE_PREFIX) :]
        if len(token) != _TOKEN_CHARS:
            return False
        try:
            given = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, binascii.Error):  # non-ASCII or malformed base64
            return False
        # A token with non-canonical trailing bits decodes to the right bytes too: compare the
        # canonical re-encoding so that exactly one string is the signature of a text.
        if base64.urlsafe_b64encode(given).rstrip(b"=").decode("ascii") != token:
            return False
        return hmac.compare_digest(given, self._mac(text))


def _fernet(key: bytes) -> Fernet:
    """The Fernet of a signing key: its 32 bytes from HKDF-SHA256 under the seal label."""
    try:
        from cryptography.fernet import Fernet
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    except ImportError as exc:  # pragma: no cover - the server extra installs it
        raise ImportError(
            "sealing reasoning (Responses encrypted_content) needs the 'cryptography' package: "
            "pip install 'deltaflow[server]'"
        ) from exc
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SEAL_LABEL).derive(key)
    return Fernet(base64.urlsafe_b64encode(derived))


class ReasoningSealer:
    """Seals reasoning text for a client to carry, and opens what it brings back.

    A seal is ``"dfe1."`` and a Fernet token of the text's UTF-8 (authenticated
    encryption; see the module docstring): the client can neither read nor
    alter it, and only a sealer of the same key opens it.

    Args:
        key: the signing key (a ``str`` is UTF-8 encoded), the same one a
            :class:`ReasoningSigner` takes; the sealing key is derived from
            it. None: the per-process random key (the one keyless signers use).
        ttl: the age in seconds beyond which a seal no longer opens (None:
            seals never expire).

    Raises:
        ValueError: ``key`` is empty, or ``ttl`` is not positive.
        TypeError: ``key`` is not ``bytes``, ``str`` or None.
        ImportError: ``cryptography`` is not installed.
    """

    __slots__ = ("_fernet", "_ttl")

    def __init__(self, key: bytes | str | None = None, *, ttl: int | None = None) -> None:
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0):
            raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        self._fernet = _fernet(_key_bytes(key))
        self._ttl = ttl

    @classmethod
    def from_signer(cls, signer: ReasoningSigner, *, ttl: int | None = None) -> ReasoningSealer:
        """The sealer of a signer's key (what ``ReasoningSealer(key)`` is for the key the signer was made with).

        Raises:
            TypeError: ``signer`` is not a :class:`ReasoningSigner`.
        """
        if not isinstance(signer, ReasoningSigner):
            raise TypeError(f"signer must be a ReasoningSigner, got {type(signer).__name__}")
        return cls(signer._key, ttl=ttl)

    def __repr__(self) -> str:
        return f"ReasoningSealer(key=<hidden>, ttl={self._ttl!r})"

    def seal(self, text: str) -> str:
        """The seal of ``text`` (a fresh one each call: Fernet uses a random IV and the current time).

        Raises:
            TypeError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return SEAL_PREFIX + self._fernet.encrypt(_utf8(text)).decode("ascii")

    def open(self, token: object) -> str | None:
        """The text ``token`` seals, or None when it is not this sealer's seal.

        Never raises: a non-str, a wrong prefix, a tampered or truncated
        token, one sealed under another key, or one older than ``ttl`` is None.
        """
        from cryptography.fernet import InvalidToken

        if not isinstance(token, str) or not token.startswith(SEAL_PREFIX) or not token.isascii():
            return None
        body = token[len(SEAL_PREFIX) :]
        try:
            # Exactly one string is the seal of a token: base64 with stray characters after its padding
            # decodes to the same bytes, so the canonical re-encoding must be what was sent.
            if base64.urlsafe_b64encode(base64.urlsafe_b64decode(body)).decode("ascii") != body:
                return None
            return self._fernet.decrypt(body, ttl=self._ttl).decode("utf-8", "surrogatepass")
        except (InvalidToken, ValueError, TypeError):  # binascii.Error is a ValueError
            return None
