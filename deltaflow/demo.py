"""``deltaflow demo``: a bundled transcript streamed live through the full pipeline."""

from __future__ import annotations

import json
import logging
from typing import TextIO

import anyio
import structlog

from .pipeline.runner import stream
from .pipeline.sync import accumulate, parse_complete
from .server.engine import EngineRequest, ReplayEngine
from .testing import message_key

__all__ = ("run_demo",)

_DIM, _BOLD, _CYAN, _RESET = "\x1b[2m", "\x1b[1m", "\x1b[36m", "\x1b[0m"


def run_demo(
    *,
    transcript: str = "qwen3-coding-agent",
    replay: str | None = None,
    tokens_per_second: float = 200.0,
    color: bool = False,
    stdout: TextIO,
) -> int:
    """Stream one transcript and print what arrives; returns the exit status.

    Raises:
        ValueError: an unknown transcript name (the message lists the available ones).
    """
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    engine = ReplayEngine(replay, tokens_per_second=tokens_per_second)
    models = {m.id: m for m in engine.models()}
    if transcript not in models:
        raise ValueError(f"unknown transcript {transcript!r}; available: {', '.join(sorted(models))}")
    info = models[transcript]
    dim, bold, cyan, reset = (_DIM, _BOLD, _CYAN, _RESET) if color else ("", "", "", "")

    async def main() -> int:
        stdout.write(
            f"{bold}deltaflow demo{reset}: {transcript} (tool parser {info.tool_parser}, "
            f"reasoning parser {info.reasoning_parser}, "
            f"{'token ids through a real tokenizer' if info.tokenizer is not None else 'text chunks'})\n\n"
        )
        deltas_seen = []
        kind = None
        request = EngineRequest(model=transcript, protocol="demo")
        async with stream(
            engine.generate(request),
            tool_parser=info.tool_parser,
            reasoning_parser=info.reasoning_parser,
            tokenizer=info.tokenizer,
        ) as deltas:
            async for d in deltas:
                deltas_seen.append(d)
                if d.reasoning_content:
                    if kind != "reasoning":
                        stdout.write(f"\n{bold}[reasoning]{reset}\n")
                        kind = "reasoning"
                    stdout.write(f"{dim}{d.reasoning_content}{reset}")
                if d.tool_calls:
                    for tc in d.tool_calls:
                        if tc.function.name is not None:
                            stdout.write(f"\n{bold}[tool call {tc.index}] {cyan}{tc.function.name}{reset} ")
                            kind = "tool"
                        if tc.function.arguments:
                            stdout.write(f"{cyan}{tc.function.arguments}{reset}")
                if d.content:
                    if kind != "content":
                        stdout.write(f"\n{bold}[content]{reset}\n")
                        kind = "content"
                    stdout.write(d.content)
                stdout.flush()
        message = accumulate(deltas_seen)
        stdout.write(f"\n\n{bold}[final message]{reset}\n")
        stdout.write(json.dumps(message.to_dict(), ensure_ascii=False, indent=2) + "\n")
        u = deltas.usage
        stdout.write(
            f"\n{len(deltas_seen)} deltas, {u.completion_tokens} tokens ({u.reasoning_tokens} reasoning); "
        )
        same = message_key(message) == message_key(
            parse_complete(
                engine.text(transcript), tool_parser=info.tool_parser, reasoning_parser=info.reasoning_parser
            )
        )
        stdout.write(f"stream rebuild {'equals' if same else 'DIFFERS FROM'} parse_complete\n")
        return 0 if same else 1

    return anyio.run(main)
