"""More reasoning protocols: ``<think>`` variants of several families, and Granite's prose markers.

Every protocol here is a pure :class:`~deltaflow.parsers.spec.ReasoningDialect`
declaration (the splitter in ``stages/reasoning.py`` does the work), checked
against the vLLM reasoning parser of the same name and its tests
(shared/corpus/vllm.jsonl):

* ``step3p5`` (StepFun Step-3.5), ``olmo3`` (OLMo 3 Think), ``nemotron_v3``
  (NVIDIA Nemotron 3) and ``holo2`` (H Company Holo2): the prompt opens
  ``<think>``, so the output starts inside reasoning; a ``<think>`` the model
  writes itself is consumed; the first ``</think>`` ends reasoning, and an
  output without it is all reasoning. ``enable_thinking=False`` makes all of
  it content. Reasoning and content are kept verbatim, except Step-3.5's
  newlines right before ``</think>``, which are its template's framing and
  dropped (vLLM's parser trims them; the newline after ``</think>`` stays
  content, as in vLLM's vectors).
* ``hy_v3`` (Tencent Hunyuan HY-V3): the same grammar, but the model thinks
  only when asked (vLLM reads ``reasoning_effort``; anything other than
  ``no_think`` turns thinking on, and none given means ``no_think``), so
  reasoning is split only with ``enable_thinking=True``.
* ``granite`` (IBM Granite 3.2/3.3 with ``thinking=True``): plain-text
  markers the chat template asks for, ``Here is my thought process:`` and
  ``Here is my response:``. Reasoning does not start open: an output that
  does not begin with the first marker is all content.

Stable-prefix guarantee (the splitter's): text is released at once except a
chunk tail that may begin the start marker (only at the start of the output)
or the end marker (while reasoning); at most one marker's length is held.

Token prefixes: none of these families has a tokenizer under
shared/tokenizers except Holo2, whose Qwen3(-VL) vocabulary encodes
``<think>``/``</think>`` as single tokens (checked in
tests/unit/parsers/test_more_reasoning.py). For the others every proper
prefix of each marker is declared, so ``chunking="tokens"`` holds exactly
what ``"any"`` holds: always correct, at the cost of holding a few
characters that a real tokenizer might never leave at a boundary.

Declared with the splitter's options (``start_labels``, ``content_wrap``,
``content_lstrip_newlines``, ``reentrant``):

* ``gemma4`` (Gemma 4, llama.cpp ``gemma4``): ``<|channel>thought\n...<channel|>``.
  The model opens the channel itself (reasoning does not start open); the
  ``thought`` label after ``<|channel>`` (with or without its newline) is
  dropped. The channel markers are special tokens that are never text
  (reentrant): a ``<|channel>`` later in the content opens another reasoning
  block, a doubled ``<|channel>`` is dropped, and a stray ``<channel|>`` in
  the content is dropped (as vLLM's streaming path and llama.cpp do).
* ``hunyuan_a13b`` (Hunyuan-A13B): ``<think>\n...\n</think>\n<answer>\n...\n</answer>``
  with vLLM's newline-inclusive markers: start ``<think>`` with an optional
  ``\n`` label, end ``\n</think>``, content wrapped in ``<answer>\n`` ...
  ``\n</answer>`` (the ``\n`` after ``</think>`` is blank before the opener,
  dropped with it). Reasoning does not start open (an output without
  ``<think>`` is content, as in vLLM).
* ``ernie45`` (ERNIE-4.5 thinking): the output starts inside reasoning, ends
  at ``</think>``; content may be wrapped in ``<response>...</response>``
  (kept verbatim inside, as vLLM's non-streaming path does).
* ``command_r7b`` (Command R7B, llama.cpp's reasoning handler):
  ``<|START_THINKING|>...<|END_THINKING|>`` then content in
  ``<|START_RESPONSE|>...<|END_RESPONSE|>``; reasoning does not start open.
* ``granite_thinking_parser`` (Granite 4.2, vLLM's name): Nemotron 3's
  protocol (open ``<think>``, ``</think>``) with the newlines right after
  ``</think>`` dropped.

Not declared: Apriel's ``[BEGIN FINAL RESPONSE]`` with a prompt-prefilled
label. (MiniMax-M2's ``minimax_m2_append_think`` is declared with
``minimax_m2`` in ``xml_family``.)
"""

from __future__ import annotations

from ..registry import register_reasoning_dialect
from ..spec import ReasoningDialect, all_prefixes

__all__ = (
    "COMMAND_R7B", "ERNIE45", "GEMMA4", "GRANITE", "GRANITE_THINKING", "HOLO2", "HUNYUAN_A13B", "HY_V3",
    "NEMOTRON_V3", "OLMO3", "STEP3P5",
)

THINK_START = "<think>"
THINK_END = "</think>"
GRANITE_START = "Here is my thought process:"
GRANITE_END = "Here is my response:"


_THINK_PREFIXES = all_prefixes(THINK_START, THINK_END)

STEP3P5 = register_reasoning_dialect(
    ReasoningDialect(
        name="step3p5",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        # The template's newlines before </think> are framing (vLLM's Step-3.5 parser trims them).
        reasoning_rstrip_newlines=True,
        token_prefixes=_THINK_PREFIXES,
        families=("Step-3.5",),
    )
)

OLMO3 = register_reasoning_dialect(
    ReasoningDialect(
        name="olmo3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=_THINK_PREFIXES,
        families=("Olmo-3-7B-Think", "Olmo-3-32B-Think"),
    )
)

NEMOTRON_V3 = register_reasoning_dialect(
    ReasoningDialect(
        name="nemotron_v3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=_THINK_PREFIXES,
        families=("NVIDIA-Nemotron-3-Nano-30B-A3B",),
    )
)

HOLO2 = register_reasoning_dialect(
    ReasoningDialect(
        name="holo2",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        # Holo2 is built on Qwen3-VL: <think> 151667 and </think> 151668 are single tokens.
        token_prefixes=(),
        tokenizers=("qwen3",),
        turn_markers=("<|im_start|>", "<|im_end|>"),
        families=("Holo2-4B", "Holo2-8B", "Holo2-30B-A3B"),
    )
)

HY_V3 = register_reasoning_dialect(
    ReasoningDialect(
        name="hy_v3",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        token_prefixes=_THINK_PREFIXES,
        families=("Hunyuan-HY-V3",),
        # vLLM's hy_v3 parser is the identity parser unless reasoning_effort asks for thinking.
        default_enabled=False,
    )
)

GRANITE = register_reasoning_dialect(
    ReasoningDialect(
        name="granite",
        start=GRANITE_START,
        end=GRANITE_END,
        starts_open=False,
        # Prose markers: a BPE tokenizer may stop after any word (or inside one).
        token_prefixes=all_prefixes(GRANITE_START, GRANITE_END),
        families=("granite-3.2-8b-instruct", "granite-3.3-8b-instruct"),
    )
)

GEMMA4_START = "<|channel>"
GEMMA4_END = "<channel|>"

GEMMA4 = register_reasoning_dialect(
    ReasoningDialect(
        name="gemma4",
        start=GEMMA4_START,
        end=GEMMA4_END,
        # The chat template does not open the channel: the model writes <|channel>thought\n.
        starts_open=False,
        start_labels=("thought\n", "thought"),
        # The channel markers are special tokens (never text); no Gemma 4 tokenizer under
        # shared/tokenizers, so every prefix is declared.
        reentrant=True,
        token_prefixes=all_prefixes(GEMMA4_START, GEMMA4_END),
        families=("gemma-4-E2B-it", "gemma-4-E4B-it", "gemma-4-26B-A4B-it", "gemma-4-31B-it"),
    )
)

HUNYUAN_ANSWER = ("<answer>\n", "\n</answer>")

HUNYUAN_A13B = register_reasoning_dialect(
    ReasoningDialect(
        name="hunyuan_a13b",
        # vLLM matches "<think>\n" and "\n</think>\n<answer>\n" as token sequences (not single tokens).
        start=THINK_START,
        end="\n" + THINK_END,
        starts_open=False,
        start_labels=("\n",),
        content_wrap=HUNYUAN_ANSWER,
        token_prefixes=all_prefixes(THINK_START, "\n" + THINK_END, *HUNYUAN_ANSWER),
        families=("Hunyuan-A13B",),
    )
)

ERNIE_RESPONSE = ("<response>", "</response>")

ERNIE45 = register_reasoning_dialect(
    ReasoningDialect(
        name="ernie45",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        content_wrap=ERNIE_RESPONSE,
        token_prefixes=all_prefixes(THINK_START, THINK_END, *ERNIE_RESPONSE),
        families=("ERNIE-4.5-Thinking",),
    )
)

COMMAND_R7B_RESPONSE = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")

COMMAND_R7B = register_reasoning_dialect(
    ReasoningDialect(
        name="command_r7b",
        start="<|START_THINKING|>",
        end="<|END_THINKING|>",
        starts_open=False,
        content_wrap=COMMAND_R7B_RESPONSE,
        token_prefixes=all_prefixes("<|START_THINKING|>", "<|END_THINKING|>", *COMMAND_R7B_RESPONSE),
        families=("c4ai-command-r7b-12-2024",),
    )
)

GRANITE_THINKING = register_reasoning_dialect(
    ReasoningDialect(
        name="granite_thinking_parser",
        start=THINK_START,
        end=THINK_END,
        starts_open=True,
        content_lstrip_newlines=True,
        token_prefixes=_THINK_PREFIXES,
        families=("Granite 4.2 (thinking)",),
    )
)
