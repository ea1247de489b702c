"""Signatures of Anthropic thinking blocks (stdlib only: ``hmac``, ``hashlib``, ``secrets``, ``base64``).

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
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading

import structlog

__all__ = ("SIGNATURE_PREFIX", "ReasoningSigner")

SIGNATURE_PREFIX = "dfs1."
"""The version prefix of every signature this module makes."""

_DOMAIN = b"deltaflow.thinking.v1\x00"
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
        if key is None:
            self._key = _per_process_key()
            return
        if isinstance(key, str):
            raw = key.encode("utf-8")
        elif isinstance(key, (bytes, bytearray)):
            raw = bytes(key)
        else:
            raise TypeError(f"the signing key must be bytes, str or None, got {type(key).__name__}")
        if not raw:
            raise ValueError("the signing key is empty: pass a non-empty key, or None for a per-process random key")
        self._key = raw

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
