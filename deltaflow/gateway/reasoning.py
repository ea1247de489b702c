"""Reasoning a client sends back: rendered as the model's own only when deltaflow produced it.

Interleaved-thinking models (GLM-4.7, MiniMax-M2, Kimi K2, DeepSeek V3.2,
gpt-oss) expect their earlier reasoning in the next prompt, and their
templates put an assistant turn's ``reasoning_content`` where the model
would have written it. A client that could put any text there could put
words in the model's mouth, so :func:`verify_reasoning` filters the
conversation before it is rendered: what deltaflow can show it produced is
kept, what it cannot is dropped or refused, as the operator chose
(:data:`ReasoningPolicy`). Per API:

* **Anthropic Messages**: a ``thinking`` block is kept when its
  ``signature`` is this server's :class:`~deltaflow.signing.ReasoningSigner`
  signature of its text (Claude Code sends back the blocks it got, which
  verify). A block that was altered, or signed by someone else (a
  conversation begun on a real Anthropic model), is unverified.
  ``redacted_thinking`` blocks carry no text: they are always dropped,
  never refused.
* **OpenAI Responses**: a ``reasoning`` item is kept when its
  ``encrypted_content`` opens with this server's
  :class:`~deltaflow.signing.ReasoningSealer` (what the Responses framer
  wrote when the request asked ``include: ["reasoning.encrypted_content"]``;
  Codex CLI sends it back with ``store: false``); the text rendered is the
  text the seal holds, whatever ``content``/``summary`` text came with it.
  An item whose seal does not open (altered, expired, sealed by another
  server or by OpenAI) is unverified, and so is an item with ``content`` or
  ``summary`` text but no seal: deltaflow did not produce that text, or
  cannot tell that it did. A client that wants its reasoning carried asks
  for ``encrypted_content``, as OpenAI's own stateless clients do.
* **OpenAI Chat Completions** has no signature or seal:
  ``reasoning_content`` (or ``reasoning``) in the history is accepted as
  given by default, as vLLM and SGLang render it. This is consistent: in
  Chat the client writes the whole history (every assistant ``content``
  and tool call too), so a verified reasoning field would guard nothing
  the rest of the message does not already expose. An operator who wants
  otherwise sets :data:`ChatReasoningPolicy` ``"drop"`` or ``"refuse"``.

Unverified reasoning is **dropped** by default (``"drop"``): the block
leaves the conversation before rendering, and the request proceeds (the
friendlier choice for a client that switched models mid-conversation,
whose earlier blocks are another server's). ``"refuse"`` makes the request
a 400 in the client's protocol, naming the block (``messages[2].content[0]:
thinking block signature does not verify ...``). Either way, an
unverified block is never rendered as the model's thought. A block that
claims nothing (no text, no signature, no seal: a Responses item with an
empty ``summary``) is dropped, never refused; an assistant turn
left with nothing (no text, no reasoning, no calls) once its reasoning is
dropped leaves the conversation too, so the template sees no empty turn
the client did not send. When every block verifies, the conversation
renders exactly as the same conversation with the reasoning sent as plain
text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NoReturn

import msgspec
import structlog

from ..prompt.conversation import AssistantTurn, Conversation, Reasoning, Turn
from ..prompt.readers import RequestError, RequestProtocol
from ..signing import ReasoningSealer, ReasoningSigner

__all__ = (
    "CHAT_REASONING_POLICIES",
    "REASONING_POLICIES",
    "ChatReasoningPolicy",
    "ReasoningPolicy",
    "check_reasoning_policies",
    "verify_reasoning",
)

ReasoningPolicy = Literal["drop", "refuse"]
"""What becomes of reasoning sent back without a valid signature or seal (Messages, Responses)."""

ChatReasoningPolicy = Literal["accept", "drop", "refuse"]
"""What becomes of reasoning in a Chat Completions history, which cannot be verified."""

REASONING_POLICIES: tuple[ReasoningPolicy, ...] = ("drop", "refuse")
"""The values of :data:`ReasoningPolicy`."""

CHAT_REASONING_POLICIES: tuple[ChatReasoningPolicy, ...] = ("accept", "drop", "refuse")
"""The values of :data:`ChatReasoningPolicy`."""

_log = structlog.get_logger("deltaflow.gateway")

_UNSIGNED = (
    "thinking block signature does not verify: the block was altered, or was not produced by this server "
    "(e.g. by another model's API); this server refuses such reasoning: send its blocks back unchanged, "
    "or leave them out"
)
_UNOPENED = (
    "reasoning item encrypted_content does not open: it was altered, has expired, or was sealed by another "
    "server; this server refuses such reasoning: send its items back unchanged, or leave them out"
)
_UNSEALED = (
    "reasoning item has text but no encrypted_content: this server takes back only reasoning it sealed "
    "(ask for include: ['reasoning.encrypted_content'] and send the items back unchanged), or leave it out"
)
_CHAT = (
    "reasoning in a Chat Completions history cannot be verified, and this server refuses it: "
    "send the assistant messages without reasoning_content"
)


def check_reasoning_policies(policy: str, chat_policy: str) -> None:
    """Check the two policies' values.

    Raises:
        ValueError: either is not one of its values.
    """
    if policy not in REASONING_POLICIES:
        raise ValueError(f"unverified_reasoning must be one of {', '.join(REASONING_POLICIES)}, got {policy!r}")
    if chat_policy not in CHAT_REASONING_POLICIES:
        raise ValueError(f"chat_reasoning must be one of {', '.join(CHAT_REASONING_POLICIES)}, got {chat_policy!r}")


def verify_reasoning(
    conversation: Conversation,
    *,
    protocol: RequestProtocol,
    signer: ReasoningSigner,
    sealer: ReasoningSealer | None,
    policy: ReasoningPolicy = "drop",
    chat_policy: ChatReasoningPolicy = "accept",
    body: Any = None,
) -> Conversation:
    """The conversation with only the reasoning deltaflow can vouch for (see the module docstring).

    Args:
        conversation: the request, read by its protocol's reader.
        protocol: the API it was read as (``"chat"``, ``"responses"`` or ``"messages"``).
        signer: verifies Anthropic ``thinking`` signatures.
        sealer: opens Responses ``encrypted_content`` (None: no seal opens).
        policy: unverified Messages and Responses reasoning is dropped or refused.
        chat_policy: Chat reasoning is accepted, dropped or refused.
        body: the request body the conversation was read from; it gives the
            refusal the path of the block (``messages[2].content[0]``).
            None: the refusal names the block by its place among the
            conversation's reasoning blocks.

    Returns:
        ``conversation`` itself when nothing changes; else a new one whose
        kept blocks carry the text to render (a seal's text for a sealed
        Responses item) and whose dropped blocks, and assistant turns left
        empty by them, are gone.

    Raises:
        RequestError: under ``"refuse"``, the first unverified block (HTTP
            400; :meth:`~deltaflow.prompt.readers.RequestError.body` is the
            protocol's error JSON, ``param`` the block's path).
        ValueError: a policy is not one of its values.
    """
    check_reasoning_policies(policy, chat_policy)
    if not any(isinstance(t, AssistantTurn) and t.reasoning for t in conversation.turns):
        return conversation
    judge = _Judge(protocol, signer, sealer, policy, chat_policy, body)
    turns: list[Turn] = []
    changed = False
    for turn in conversation.turns:
        if not isinstance(turn, AssistantTurn) or not turn.reasoning:
            turns.append(turn)
            continue
        kept = tuple(r for r in (judge(block) for block in turn.reasoning) if r is not None)
        if kept == turn.reasoning:
            turns.append(turn)
            continue
        changed = True
        if kept or turn.content is not None or turn.tool_calls:
            turns.append(msgspec.structs.replace(turn, reasoning=kept))
    if judge.dropped:
        _log.info("reasoning_dropped", protocol=protocol, blocks=judge.dropped, reasons=sorted(judge.reasons))
    if not changed:
        return conversation
    return msgspec.structs.replace(conversation, turns=tuple(turns))


class _Judge:
    """Decides block by block, in the conversation's order (which is the body's: the readers keep it)."""

    def __init__(
        self,
        protocol: RequestProtocol,
        signer: ReasoningSigner,
        sealer: ReasoningSealer | None,
        policy: ReasoningPolicy,
        chat_policy: ChatReasoningPolicy,
        body: Any,
    ) -> None:
        self.protocol: RequestProtocol = protocol
        self.signer = signer
        self.sealer = sealer
        self.policy = policy
        self.chat_policy = chat_policy
        self.body = body
        self.index = -1
        self.dropped = 0
        self.reasons: set[str] = set()
        self._paths: list[str] | None = None

    def __call__(self, block: Reasoning) -> Reasoning | None:
        """The block to render (its text may be a seal's), or None to drop it; raises to refuse it."""
        self.index += 1
        if block.redacted:
            self._drop("redacted")
        elif self.protocol == "messages":
            if block.signature is not None and self.signer.verify(block.text, block.signature):
                return block
            self._unverified(block, "unsigned", _UNSIGNED)
        elif self.protocol == "responses":
            text = self.sealer.open(block.sealed) if block.sealed is not None and self.sealer is not None else None
            if text is not None:
                return block if text == block.text else msgspec.structs.replace(block, text=text)
            self._unverified(block, "unsealed" if block.sealed is None else "unopened",
                             _UNSEALED if block.sealed is None else _UNOPENED)
        elif self.chat_policy == "accept":
            return block
        elif self.chat_policy == "refuse" and block.text:
            self._refuse(_CHAT)
        else:
            self._drop("chat")
        return None

    def _unverified(self, block: Reasoning, reason: str, message: str) -> None:
        """Drop or refuse an unverified block; one that claims nothing (no text, signature or seal) is dropped."""
        if not block.text and block.signature is None and block.sealed is None:
            self._drop("empty")
        elif self.policy == "refuse":
            self._refuse(message)
        else:
            self._drop(reason)

    def _drop(self, reason: str) -> None:
        self.dropped += 1
        self.reasons.add(reason)

    def _refuse(self, message: str) -> NoReturn:
        path = self._path()
        if path is None:
            raise RequestError(
                f"reasoning block {self.index} of the conversation: {message}", protocol=self.protocol, param=None
            )
        raise RequestError(f"{path}: {message}", protocol=self.protocol, param=path)

    def _path(self) -> str | None:
        if self._paths is None:
            self._paths = _reasoning_paths(self.protocol, self.body)
        return self._paths[self.index] if self.index < len(self._paths) else None


def _reasoning_paths(protocol: RequestProtocol, body: Any) -> list[str]:
    """The paths of the body's reasoning blocks, in the order the readers read them."""
    if not isinstance(body, Mapping):
        return []
    out: list[str] = []
    if protocol == "responses":
        items = body.get("input")
        for i, item in enumerate(items if isinstance(items, Sequence) and not isinstance(items, str) else ()):
            if isinstance(item, Mapping) and item.get("type") == "reasoning":
                out.append(f"input[{i}]")
        return out
    messages = body.get("messages")
    for i, m in enumerate(messages if isinstance(messages, Sequence) and not isinstance(messages, str) else ()):
        if not isinstance(m, Mapping) or m.get("role") != "assistant":
            continue
        if protocol == "chat":
            for key in ("reasoning_content", "reasoning"):
                if m.get(key) is not None:
                    out.append(f"messages[{i}].{key}")
                    break
            continue
        content = m.get("content")
        if isinstance(content, Sequence) and not isinstance(content, str):
            for j, block in enumerate(content):
                if isinstance(block, Mapping) and block.get("type") in ("thinking", "redacted_thinking"):
                    out.append(f"messages[{i}].content[{j}]")
    return out
