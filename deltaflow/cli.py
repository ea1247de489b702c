"""The ``deltaflow`` command line.

Commands:
    deltaflow demo [options]             stream a bundled transcript live through the full pipeline
    deltaflow serve [options]            the OpenAI / Anthropic compatible server (replay engine, or the
                                         gateway: --upstream URL --model DIR, or --upstream URL
                                         --upstream-kind chat --served-model-name NAME);
                                         --api-key (or $DELTAFLOW_API_KEY), --max-body-bytes,
                                         --max-concurrent-streams, --idle-timeout,
                                         --signing-key (or $DELTAFLOW_SIGNING_KEY),
                                         --response-store [PATH], --unsupported-tools refuse|ignore,
                                         --blank-separators drop|keep, --no-gc-tuning
    deltaflow parse [FILE|-] [options]   parse a model output (the bundled sample when FILE is omitted)
    deltaflow parsers                    list the registered tool and reasoning parsers
    deltaflow render REQUEST.json --model DIR [--protocol chat|responses|messages] [--tokens] [--date D]
                                         print the prompt a request renders to with the model's chat
                                         template (exactly, nothing else on stdout), or its token ids

Exit status: 0 on success, 2 on a usage error (bad option, unknown parser,
unreadable or invalid input file), 1 on an unexpected failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from importlib import resources
from typing import Any, TextIO

import msgspec

from . import __version__
from .errors import DeltaflowError
from .parsers import registry
from .pipeline.sync import ResponseParser, accumulate
from .presets import resolve_model
from .stages.tool_feeder import TOOL_CALLS_IN_REASONING

__all__ = ("main",)

API_KEY_ENV = "DELTAFLOW_API_KEY"
SIGNING_KEY_ENV = "DELTAFLOW_SIGNING_KEY"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # the same defaults as deltaflow.server.create_app
DEFAULT_MAX_STREAMS = 256
DEFAULT_RESPONSE_STORE = "./deltaflow-responses.sqlite3"  # what --response-store without a PATH opens
_SAMPLE = "sample_qwen3.txt"
_SAMPLE_TOOLS = "sample_tools.json"
_SAMPLE_TOOL_PARSER = "hermes"
_SAMPLE_REASONING_PARSER = "qwen3"


class _UsageError(Exception):
    pass


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return n


def _positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value!r}") from None
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value!r}")
    return x


def _build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="deltaflow",
        description="Turn raw LLM output into content, reasoning_content and tool calls.",
    )
    ap.add_argument("--version", action="version", version=f"deltaflow {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser(
        "parse",
        help="parse a model output",
        description=(
            "Parse a model output. Without FILE, parses the bundled sample (a Qwen3 output with "
            f"reasoning and two tool calls) with --tool-parser {_SAMPLE_TOOL_PARSER} "
            f"--reasoning-parser {_SAMPLE_REASONING_PARSER} and the sample's tools, unless given."
        ),
    )
    p.add_argument("file", nargs="?", metavar="FILE", help="the model output; '-' reads standard input")
    p.add_argument("--model", metavar="MODEL", help="a model name whose preset picks the parsers (e.g. Qwen/Qwen3-8B)")
    p.add_argument("--tool-parser", metavar="NAME", help="tool parser (see 'deltaflow parsers')")
    p.add_argument("--reasoning-parser", metavar="NAME", help="reasoning parser (see 'deltaflow parsers')")
    p.add_argument("--tools", metavar="TOOLS_JSON", help="a JSON file with the request's tools list")
    p.add_argument("--no-thinking", action="store_true", help="thinking was disabled (enable_thinking=False)")
    p.add_argument(
        "--reasoning-starts-open",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=(
            "the prompt opened the reasoning block, so the output starts inside it; with "
            "--no-reasoning-starts-open reasoning starts only at a marker the model writes "
            "(default: the reasoning parser's own)"
        ),
    )
    p.add_argument(
        "--tool-calls-in-reasoning",
        choices=TOOL_CALLS_IN_REASONING,
        default="trailing",
        help=(
            "what a tool block inside reasoning is: trailing (a call only when the output ends after it), "
            "always (a call at once), never (reasoning text) (default: trailing)"
        ),
    )
    p.add_argument(
        "--chunk-size",
        type=_positive_int,
        metavar="N",
        help="feed the text in chunks of N characters (default: the whole text at once)",
    )
    p.add_argument(
        "--output",
        choices=("json", "deltas"),
        default="json",
        help="json: the complete message; deltas: one JSON delta per line (default: json)",
    )
    p.add_argument(
        "--chunking",
        choices=("any", "tokens"),
        default="any",
        help="marker hold-back mode (default: any)",
    )

    sub.add_parser("parsers", help="list the registered parsers", description="List the registered parsers.")

    d = sub.add_parser(
        "demo",
        help="stream a bundled transcript live through the full pipeline",
        description=(
            "Stream a bundled model output, tokenized with a real tokenizer, through the full async pipeline "
            "(detokenize -> router -> reasoning -> tools -> identity -> name filter -> assembler) and show reasoning, "
            "content and tool calls as they arrive, then the final message."
        ),
    )
    d.add_argument("--transcript", metavar="NAME", default="qwen3-coding-agent", help="which bundled transcript")
    d.add_argument("--replay", metavar="DIR", help="a folder of your own transcripts (NAME.txt + NAME.json)")
    d.add_argument("--tokens-per-second", type=float, default=200.0, metavar="N", help="replay rate (0: no delay)")
    d.add_argument("--no-color", action="store_true", help="plain output")

    r = sub.add_parser(
        "render",
        help="print the prompt a request renders to",
        description=(
            "Render a request body (OpenAI Chat, OpenAI Responses or Anthropic Messages) with a model's chat "
            "template, exactly as transformers renders it, and print the prompt (or its token ids) on stdout."
        ),
    )
    r.add_argument("request", metavar="REQUEST.json", help="the request body ('-': standard input)")
    r.add_argument("--model", metavar="DIR", required=True, help="the model folder (chat template, tokenizer)")
    r.add_argument(
        "--protocol",
        choices=("chat", "responses", "messages"),
        default=None,
        help="the request's API (default: responses when the body has 'input', else chat)",
    )
    r.add_argument("--tokens", action="store_true", help="print the token ids (JSON list) instead of the text")
    r.add_argument("--date", metavar="YYYY-MM-DD", default=None, help="the date strftime_now sees (default: today)")
    r.add_argument("--chat-template", metavar="FILE", default=None, help="a template file instead of the folder's")
    r.add_argument(
        "--no-generation-prompt", action="store_true", help="do not end with the assistant turn's opener"
    )

    s = sub.add_parser(
        "serve",
        help="run the OpenAI / Anthropic compatible server",
        description=(
            "Serve /v1/chat/completions, /v1/responses, /v1/messages, /v1/models and /v1/ws over a replay engine, "
            "or as a gateway in front of an upstream engine (--upstream)."
        ),
    )
    g = s.add_argument_group(
        "gateway", "serve a model through an upstream engine instead of the replay engine"
    )
    g.add_argument("--upstream", metavar="URL", help="the engine's root URL (llama.cpp, vLLM, SGLang, Ollama, TGI)")
    g.add_argument(
        "--model",
        metavar="DIR",
        help="the model folder: chat template and tokenizer (with --upstream; not needed with --upstream-kind chat)",
    )
    g.add_argument(
        "--upstream-kind",
        choices=("llamacpp", "openai", "sglang", "ollama", "tgi", "chat"),
        default=None,
        help=(
            "the upstream's API (default: detected; llama.cpp answers /props). chat: the passthrough to a server's "
            "own /v1/chat/completions, whose template and parsers are trusted (vLLM or SGLang with their parsers, "
            "llama.cpp with --jinja): no --model needed, no deltaflow constraint, nothing re-parsed; give "
            "--served-model-name"
        ),
    )
    g.add_argument(
        "--served-model-name",
        metavar="NAME",
        help="the model id clients use (default: the folder's name; required with --upstream-kind chat and no --model)",
    )
    g.add_argument("--tool-parser", metavar="NAME", help="the tool dialect (default: the model's preset)")
    g.add_argument("--reasoning-parser", metavar="NAME", help="the reasoning dialect (default: the model's preset)")
    g.add_argument("--chat-template", metavar="FILE", help="a chat template file instead of the folder's")
    g.add_argument("--context-length", type=_positive_int, metavar="N", help="prompt + answer limit in tokens")
    g.add_argument("--max-tokens", type=_positive_int, metavar="N", help="the answer's limit when a request gives none")
    g.add_argument(
        "--clamp-max-tokens",
        action="store_true",
        help="lower a request's max_tokens to the context left instead of answering 400 (Claude Code asks 32000)",
    )
    g.add_argument(
        "--unverified-reasoning",
        choices=("drop", "refuse"),
        default="drop",
        help="a thinking block or reasoning item sent back without our valid signature or seal: "
        "dropped from the prompt, or a 400 (default: drop)",
    )
    g.add_argument(
        "--chat-reasoning",
        choices=("accept", "drop", "refuse"),
        default="accept",
        help="Chat's unsigned reasoning_content in history (default: accept, as vLLM)",
    )
    g.add_argument("--config", metavar="FILE", help="a TOML file of several models (see deltaflow.gateway.config)")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    s.add_argument("--replay", metavar="DIR", help="a folder of transcripts: NAME.txt + optional NAME.json")
    s.add_argument("--tokens-per-second", type=float, default=50.0, metavar="N", help="replay rate (0: no delay)")
    s.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    s.add_argument(
        "--api-key",
        metavar="KEY",
        default=None,
        help=(
            "require this key: 'Authorization: Bearer KEY' on the OpenAI routes, 'x-api-key: KEY' (or Bearer) "
            f"on /v1/messages (default: ${API_KEY_ENV}, else no key)"
        ),
    )
    s.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help=f"largest request body accepted, else 413 (default: {DEFAULT_MAX_BODY_BYTES})",
    )
    s.add_argument(
        "--max-concurrent-streams",
        type=_positive_int,
        default=DEFAULT_MAX_STREAMS,
        metavar="N",
        help=f"engine streams running at once, beyond which requests get 429 (default: {DEFAULT_MAX_STREAMS})",
    )
    s.add_argument(
        "--idle-timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="end a stream with an error event when the engine produces nothing for this long (default: none)",
    )
    s.add_argument(
        "--tool-calls-in-reasoning",
        choices=TOOL_CALLS_IN_REASONING,
        default="trailing",
        help="what a tool block inside reasoning is: trailing, always or never (default: trailing)",
    )
    s.add_argument(
        "--signing-key",
        metavar="KEY",
        default=None,
        help=(
            "the key that signs thinking blocks on /v1/messages; give every replica the same one "
            f"(default: ${SIGNING_KEY_ENV}, else a random key per process)"
        ),
    )
    s.add_argument(
        "--response-store",
        nargs="?",
        const=DEFAULT_RESPONSE_STORE,
        default=None,
        metavar="PATH",
        help=(
            "keep stored Responses (store, previous_response_id, GET /v1/responses/ID) in this SQLite file: "
            f"kept across restarts, shared by the workers of one host (the flag alone: {DEFAULT_RESPONSE_STORE}; "
            "default: in memory, lost on restart)"
        ),
    )
    s.add_argument(
        "--unsupported-tools",
        choices=("refuse", "ignore"),
        default="refuse",
        help=(
            "what a Responses tool of a type other than 'function' (web_search, mcp, custom ...) gets: "
            "refuse (a 400 naming it, the default) or ignore (dropped, with a log line)"
        ),
    )
    s.add_argument(
        "--blank-separators",
        choices=("drop", "keep"),
        default="drop",
        help=(
            "whitespace-only text between a thought or a tool call and a tool call or the end (the blank line a "
            "template puts after </think>): drop (the default: not sent as content) or keep (sent as the parser "
            "gives it)"
        ),
    )
    s.add_argument(
        "--no-gc-tuning",
        dest="tune_gc",
        action="store_false",
        help=(
            "leave Python's garbage collector as it is (by default the server freezes what is alive once it "
            "has started and collects less often: with many open streams, full collections took a quarter of "
            "its CPU)"
        ),
    )
    return ap


def _read_text(path: str | None, stdin: TextIO) -> str:
    if path is None:
        return resources.files("deltaflow").joinpath("data", _SAMPLE).read_text(encoding="utf-8")
    if path == "-":
        return stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise _UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise _UsageError(f"{path} is not UTF-8 text: {exc}") from None


def _read_tools(path: str | None, sample: bool) -> list[Any] | None:
    if path is None:
        if not sample:
            return None
        raw = resources.files("deltaflow").joinpath("data", _SAMPLE_TOOLS).read_text(encoding="utf-8")
        return json.loads(raw)  # type: ignore[no-any-return]
    try:
        with open(path, encoding="utf-8") as f:
            tools = json.load(f)
    except OSError as exc:
        raise _UsageError(f"cannot read tools file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise _UsageError(f"tools file {path} is not valid JSON: {exc}") from None
    if isinstance(tools, dict) and "tools" in tools:
        tools = tools["tools"]
    if not isinstance(tools, list):
        raise _UsageError(f'tools file {path} must hold a JSON list of tools (or {{"tools": [...]}})')
    return tools


def _cmd_parse(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    sample = args.file is None
    tool_parser = args.tool_parser
    reasoning_parser = args.reasoning_parser
    if args.model is not None:
        preset = resolve_model(args.model)
        tool_parser = tool_parser or preset.tool_parser
        reasoning_parser = reasoning_parser or preset.reasoning_parser
    elif sample:
        tool_parser = tool_parser or _SAMPLE_TOOL_PARSER
        reasoning_parser = reasoning_parser or _SAMPLE_REASONING_PARSER
    if tool_parser is not None:
        registry.get_tool_dialect(tool_parser)  # unknown names fail before any input is read
    if reasoning_parser is not None:
        registry.get_reasoning_dialect(reasoning_parser)
    tools = _read_tools(args.tools, sample and args.tools is None and args.tool_parser is None and args.model is None)
    parser = ResponseParser(
        tool_parser,
        reasoning_parser,
        tools,
        False if args.no_thinking else None,
        chunking=args.chunking,
        reasoning_starts_open=args.reasoning_starts_open,
        tool_calls_in_reasoning=args.tool_calls_in_reasoning,
    )
    text = _read_text(args.file, stdin)
    size = args.chunk_size or max(len(text), 1)
    deltas = []
    for i in range(0, len(text), size):
        deltas.extend(parser.feed(text[i : i + size]))
    deltas.extend(parser.feed("", final=True))
    if args.output == "deltas":
        enc = msgspec.json.Encoder()
        stdout.writelines(enc.encode(d).decode("utf-8") + "\n" for d in deltas)
    else:
        json.dump(accumulate(deltas).to_dict(), stdout, ensure_ascii=False, indent=2)
        stdout.write("\n")
    return 0


def _cmd_parsers(stdout: TextIO) -> int:
    stdout.write("tool parsers:\n")
    for name in registry.tool_dialect_names():
        d = registry.get_tool_dialect(name)
        stdout.write(f"  {name:<16} {d.description}\n")
        if d.families:
            stdout.write(f"  {'':<16} models: {', '.join(d.families)}\n")
    stdout.write("reasoning parsers:\n")
    for name in registry.reasoning_dialect_names():
        r = registry.get_reasoning_dialect(name)
        if r.inline:
            opens = f"not split: the output is content, with {r.start} put back in front"
        elif r.starts_open and r.default_enabled:
            opens = "starts inside reasoning unless thinking is disabled"
        elif r.starts_open:
            opens = "only when thinking is enabled; then starts inside reasoning"
        else:
            opens = "reasoning opened by the model"
        stdout.write(f"  {name:<16} {r.start} ... {r.end} ({opens})\n")
        if r.families:
            stdout.write(f"  {'':<16} models: {', '.join(r.families)}\n")
    return 0


def _cmd_render(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    import datetime as dt

    from .prompt.render import PromptModel, Protocol

    raw = _read_text(args.request, stdin)
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise _UsageError(f"{args.request} is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _UsageError(f"{args.request} must hold a JSON object (a request body)")
    date = None
    if args.date is not None:
        try:
            date = dt.datetime.strptime(args.date, "%Y-%m-%d")
        except ValueError:
            raise _UsageError(f"--date must be YYYY-MM-DD, got {args.date!r}") from None
    protocol: Protocol = args.protocol or ("responses" if "input" in body and "messages" not in body else "chat")
    if not os.path.isdir(args.model):
        raise _UsageError(f"--model {args.model}: not a folder (a model folder holds its chat template)")
    model = PromptModel.from_folder(args.model, template_file=args.chat_template, tokenizer=args.tokens)
    from .prompt.render import render_prompt

    if args.tokens and model.tokenizer is None:
        raise _UsageError(f"--tokens: {args.model} has no tokenizer.json")
    prompt = render_prompt(
        body, model=model, protocol=protocol, add_generation_prompt=not args.no_generation_prompt, date=date,
        tokens=args.tokens,
    )
    if args.tokens:
        stdout.write(json.dumps(prompt.token_ids) + "\n")
    else:
        stdout.write(prompt.text)
    return 0


def _gateway_engine(args: argparse.Namespace) -> Any:
    """The gateway engine the serve flags describe, or None (the replay engine)."""
    gateway_flags = ("model", "upstream_kind", "served_model_name", "chat_template", "context_length", "max_tokens")
    if args.upstream is None and args.config is None:
        given = [f"--{f.replace('_', '-')}" for f in gateway_flags if getattr(args, f) is not None]
        if given:
            raise _UsageError(f"{', '.join(given)} need --upstream URL (or --config FILE)")
        return None
    if args.replay is not None:
        raise _UsageError("--replay serves transcripts; it cannot be combined with --upstream or --config")
    import anyio

    from .gateway.config import GatewayConfig, ModelConfig, build_engine, load_config

    if args.config is not None:
        if args.upstream is not None or args.model is not None:
            raise _UsageError("--config FILE describes the models; leave out --upstream and --model")
        config = load_config(args.config)
    else:
        if args.upstream_kind == "chat":
            folder_flags = ("chat_template", "tool_parser", "reasoning_parser", "context_length")
            given = [f"--{f.replace('_', '-')}" for f in folder_flags if getattr(args, f) is not None]
            given += ["--clamp-max-tokens"] if args.clamp_max_tokens else []
            if given:
                raise _UsageError(f"{', '.join(given)}: not used with --upstream-kind chat (its server renders the "
                                  "prompt and parses the output itself)")
            if args.model is None and args.served_model_name is None:
                raise _UsageError("--upstream-kind chat without --model needs --served-model-name NAME (the model "
                                  "id clients use)")
        elif args.model is None:
            raise _UsageError("--upstream needs --model DIR (the folder with the chat template and tokenizer), "
                              "or --upstream-kind chat for a server that renders and parses itself")
        try:
            config = GatewayConfig(models=[ModelConfig(
                name=args.served_model_name,
                upstream=args.upstream,
                upstream_kind=args.upstream_kind,
                model=args.model,
                chat_template=args.chat_template,
                tool_parser=args.tool_parser,
                reasoning_parser=args.reasoning_parser,
                context_length=args.context_length,
                max_tokens=args.max_tokens,
                clamp_max_tokens=args.clamp_max_tokens,
            )], unverified_reasoning=args.unverified_reasoning, chat_reasoning=args.chat_reasoning)
        except ValueError as exc:
            raise _UsageError(f"--upstream {args.upstream!r}: {exc}") from None
    return anyio.run(build_engine, config)


def _cmd_serve(args: argparse.Namespace) -> int:
    import logging

    import structlog
    import uvicorn

    from .server import ReplayEngine, create_app
    from .server.store import SQLiteResponseStore

    level = getattr(logging, args.log_level.upper())
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    engine: Any = _gateway_engine(args)
    if engine is None:
        engine = ReplayEngine(args.replay, tokens_per_second=args.tokens_per_second)
    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    signing_key = args.signing_key if args.signing_key is not None else os.environ.get(SIGNING_KEY_ENV) or None
    if signing_key == "":
        raise _UsageError("--signing-key must not be empty (leave it out for a random key per process)")
    store = SQLiteResponseStore(args.response_store) if args.response_store is not None else None
    app = create_app(
        engine,
        api_key=api_key,
        max_body_bytes=args.max_body_bytes,
        max_streams=args.max_concurrent_streams,
        idle_timeout=args.idle_timeout,
        signing_key=signing_key,
        tool_calls_in_reasoning=args.tool_calls_in_reasoning,
        response_store=store,
        unsupported_tools=args.unsupported_tools,
        blank_separators=args.blank_separators,
        tune_gc=args.tune_gc,
    )
    # Never print either key: only whether one is set.
    sys.stderr.write(
        f"deltaflow: serving {', '.join(m.id for m in engine.models())} on http://{args.host}:{args.port}/v1"
        f" ({'API key required' if api_key else 'no API key'};"
        f" {'signing key set' if signing_key else 'per-process signing key'};"
        f" responses stored {'in ' + args.response_store if store is not None else 'in memory'})\n"
    )
    # uvicorn's own WebSocket message cap must not undercut --max-body-bytes.
    ws_max = max(args.max_body_bytes, 16 * 1024 * 1024)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, ws_max_size=ws_max)
    return 0


def main(argv: Sequence[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    ap = _build_parser()
    args = ap.parse_args(argv)
    try:
        if args.command == "parsers":
            return _cmd_parsers(stdout)
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(
                transcript=args.transcript,
                replay=args.replay,
                tokens_per_second=args.tokens_per_second,
                color=not args.no_color and stdout.isatty(),
                stdout=stdout,
            )
        if args.command == "serve":
            return _cmd_serve(args)
        if args.command == "render":
            return _cmd_render(args, stdin, stdout)
        return _cmd_parse(args, stdin, stdout)
    except (_UsageError, DeltaflowError, ValueError) as exc:
        sys.stderr.write(f"deltaflow: error: {exc}\n")
        return 2
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return 0
