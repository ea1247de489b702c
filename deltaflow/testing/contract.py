"""A contract checker for tool dialects: the driver contract, run on sample outputs.

In the spirit of trio's ``trio.testing.check_one_way_stream`` (one function runs
a protocol's whole contract on an implementation) and of h11's three-way feeding
(whole, one character at a time, at chosen split points):
:func:`check_tool_dialect` takes a registered tool dialect and a few sample
outputs and checks what every driver promises
(:class:`~deltaflow.parsers.spec.ToolDriver`, :class:`~deltaflow.parsers.base.DriverBase`),
raising :class:`AssertionError` with a message that names the dialect, the
sample and the split.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from .._core.text import skip_json_ws
from .._core.toolspec import ToolSpec
from ..items import Channel, ChannelText, ToolDelta
from ..parsers.registry import get_tool_dialect
from ..parsers.spec import DriverContext, ToolDialect, ToolDriver
from ..pipeline.sync import accumulate, parse_complete
from ..tools import normalize_tools
from . import check_chunkings, feed_chunks, message_key, random_chunks, split_at

__all__ = ("HELD_SLACK", "TRAILING", "check_tool_dialect")

HELD_SLACK = 600
"""What a driver may hold past its longest marker while it is fed one character at a time.

Derived from the drivers' documented stable-prefix guarantees: besides a partial
marker, a driver holds at most a header or a name until its end (512 characters at
most: ``MAX_HEADER``, ``TAG_MAX``, Gemma 4's name bound), a run of blanks
(``BLANK_RUN_MAX``, 256), or a JSON key, a colon and a partial scalar. With short
values all of these fit well within 600 characters. Not covered: a value that needs
whole conversion (a Python literal, an untyped XML scalar of up to ``SCALAR_MAX``
characters, a stringified arguments object), which a driver holds whole while it is
open: samples keep such values short.
"""

TRAILING = "\nTRAILING after"
"""The text put after every sample to check that nothing past a block is consumed."""

_PREFIX = "PROSE BEFORE "  # text before ``start`` that a driver must neither consume nor attribute
_BLANKS = "\n "  # blanks between ``start`` and the opener: the driver consumes them (as between two blocks)


def _clip(text: str, limit: int = 160) -> str:
    r = repr(text)
    return r if len(r) <= limit else f"{r[: limit // 2]}...{r[-limit // 2 :]} ({len(text)} chars)"


def _accounted(events: Sequence[object]) -> str:
    """The input text the events account for, in order: raw text, and the text of plain-text events."""
    return "".join(e.raw if isinstance(e, ToolDelta) else e.text if isinstance(e, ChannelText) else "" for e in events)


def _calls(events: Sequence[object]) -> list[tuple[Any, ...]]:
    """Per call, in order of its first event: channel, names, ids, arguments, raw, surfaced raw, ends, abort;
    then the plain text. What must not depend on the chunking (only the number of events may)."""
    per: dict[int, dict[str, Any]] = {}
    text: list[str] = []
    for e in events:
        if isinstance(e, ChannelText):
            text.append(e.text)
            continue
        assert isinstance(e, ToolDelta), f"a driver emitted {e!r}"
        c = per.setdefault(
            e.call,
            {"channel": e.channel, "names": [], "ids": [], "args": [], "raw": [], "surfaced": [], "ends": 0,
             "abort": 0},
        )
        if e.name is not None:
            c["names"].append(e.name)
        if e.id is not None:
            c["ids"].append(e.id)
        c["args"].append(e.args)
        (c["surfaced"] if e.abort else c["raw"]).append(e.raw)
        c["ends"] += e.end
        c["abort"] |= e.abort
    out: list[tuple[Any, ...]] = [
        (
            n, c["channel"], tuple(c["names"]), tuple(c["ids"]), "".join(c["args"]), "".join(c["raw"]),
            "".join(c["surfaced"]), c["ends"], bool(c["abort"]),
        )
        for n, c in per.items()
    ]
    out.append(("text", "".join(text)))
    return out


def _blank_surface(call: tuple[Any, ...]) -> bool:
    """Whether a :func:`_calls` entry is nothing but surfaced blanks."""
    return call[0] != "text" and call[2:6] == ((), (), "", "") and not call[6].strip() and not call[7]


@dataclass
class _Run:
    """What feeding one chunking gave."""

    events: list[object] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # where each block ended (absolute positions)
    pos: int = 0  # the caller's position: the end of the last block, or the last consumed position
    max_held: int = 0  # the longest tail the caller held for a driver that was not done
    held_at: int = 0
    held_text: str = ""
    max_unreleased: int = 0  # the most text fed that no event accounted for yet (the caller's tail + the driver's)
    unreleased_at: int = 0
    accounted: int = 0  # how much text the events so far account for
    seen: int = 0  # how many events ``accounted`` counted


class _Checker:
    """The checks of :func:`check_tool_dialect` for one dialect."""

    def __init__(
        self,
        dialect: ToolDialect,
        tools: Iterable[Any] | None,
        *,
        dropped: Iterable[str] = (),
        random_splits: int = 3,
        seed: int = 0,
        cut_outputs: int = 40,
    ) -> None:
        self.d = dialect
        self.name = dialect.name
        self.tools = list(tools) if tools is not None else None
        specs = normalize_tools(self.tools)
        self.specs: Mapping[str, ToolSpec] | None = {s.name: s for s in specs} if specs is not None else None
        request = dialect.openers_for(self.specs) if dialect.openers_for is not None else ()
        if dialect.openers_for is not None and not request and not dialect.openers:
            raise ValueError(f"tool dialect {self.name!r} takes its openers from the request: pass tools=")
        self.openers = (*dialect.openers, *request, *dialect.start_openers)
        self.markers = tuple(m for m in dict.fromkeys((*dialect.markers, *request)) if m)
        self.owns_output = "" in dialect.start_openers  # the one block lasts to the end of the output
        # Blanks right after the block are its framing, by declaration (ERNIE's JsonEnvelopeFormat option).
        self.trailing_blanks = bool(getattr(dialect.format, "trailing_blanks", False))
        self.routed = not self.openers  # the channel router hands the driver its text (Harmony)
        self.dropped = tuple(dropped)
        self.seeds = range(seed, seed + random_splits)
        self.cut_outputs = cut_outputs
        self.bound = max((len(m) for m in self.markers), default=0) + HELD_SLACK
        self.label = ""

    def fail(self, split: str, what: str) -> NoReturn:
        raise AssertionError(f"tool dialect {self.name!r}, {self.label}, {split}: {what}")

    # -- feeding drivers as the tool feeder does ------------------------------------------------------
    def new_driver(self, ctx: DriverContext) -> ToolDriver:
        return self.d.factory(ctx)

    def opener_end(self, text: str, pos: int) -> int:
        """Where the opener after the blanks at ``pos`` ends (-1: no block opens there).

        The feeder opens a block only once its whole opener is in the text (it holds a
        partial one), so a driver's first feed always holds it.
        """
        ws = skip_json_ws(text, pos)
        found = [len(o) for o in self.openers if text.startswith(o, ws)]
        if not found or ws >= len(text):
            return -1
        return ws + max(found)

    def feed(
        self,
        text: str,
        chunks: Sequence[str],
        split: str,
        *,
        limits: Sequence[int] | None = None,
        start: int = 0,
        finish: bool = True,
    ) -> _Run:
        """Feed ``chunks`` (together ``text[start:]``) as the tool feeder does.

        Each chunk is appended to the unconsumed tail and the whole is given again
        (``final`` with the last chunk if ``finish``); a driver is first fed once its opener is whole;
        a block that ends where (after blanks) another opens, on the whole text, is
        followed by a fresh driver (the feeder's rule for blanks between blocks).
        """
        run = _Run(pos=start)
        counter = itertools.count()
        ctx = DriverContext(
            channel=Channel.CONTENT, new_call=lambda: next(counter), tools=self.specs, dialect=self.name
        )
        driver: ToolDriver | None = self.new_driver(ctx)
        opened = self.opener_end(text, start)  # a sample cut inside its opener has none: fed as it is
        buf = text[:start]
        base = 0  # the absolute position of buf[0]
        began = start  # where the current block began
        for k, chunk in enumerate(chunks):
            buf += chunk
            final = finish and k == len(chunks) - 1
            while driver is not None:
                if not final and (base + len(buf) <= run.pos or base + len(buf) < opened):
                    break  # nothing new, or the opener is not whole yet (the feeder holds it)
                off = run.pos - base
                end = driver.feed_tool_block(buf, run.events, final, off)
                if not off <= end <= len(buf):
                    self.fail(split, f"feed_tool_block returned {end}, outside [{off}, {len(buf)}] of {_clip(buf)}")
                at = run.pos = base + end
                b = len(run.ends)
                if limits is not None and b < len(limits) and at > limits[b]:
                    self.fail(
                        split,
                        f"block {b} consumed up to {at}, past its end {limits[b]} in the whole run "
                        f"(it took {_clip(text[limits[b] : at])})",
                    )
                if not driver.done:
                    if final:
                        self.fail(split, f"fed with final=True, the driver is not done (returned {at} of {len(text)})")
                    self.measure(run, buf, base, end, start)
                    buf, base = buf[end:], at
                    break
                run.ends.append(at)
                buf, base = buf[end:], at
                opened = self.opener_end(text, at)
                if opened >= 0 and at == began:
                    self.fail(split, f"the block ended where it began ({at}), before its opener: the feeder would loop")
                began = at
                driver = self.new_driver(ctx) if opened >= 0 else None
        return run

    @staticmethod
    def measure(run: _Run, buf: str, base: int, end: int, start: int) -> None:
        """Record what is held after a feed that left the driver not done."""
        held = len(buf) - end
        if held > run.max_held:
            run.max_held, run.held_at, run.held_text = held, base + len(buf), buf[end:]
        run.accounted += len(_accounted(run.events[run.seen :]))
        run.seen = len(run.events)
        unreleased = base + len(buf) - start - run.accounted
        if unreleased > run.max_unreleased:
            run.max_unreleased, run.unreleased_at = unreleased, base + len(buf)

    # -- the checks ------------------------------------------------------------------------------------
    def check_raw(self, text: str, run: _Run, split: str, start: int = 0) -> None:
        """Check 5: the raw text of the events plus the unconsumed rest is the input (from ``start``)."""
        got = _accounted(run.events) + text[run.pos :]
        want = text[start:]
        for d in self.dropped:
            want = want.replace(d, "")
        if got != want:
            i = next((j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
            self.fail(
                split,
                f"the raw text of the events + the unconsumed rest is not the input: they differ at {i} "
                f"(got {_clip(got[max(0, i - 20) : i + 40])}, want {_clip(want[max(0, i - 20) : i + 40])})",
            )

    def check_sample(self, sample: str, well_formed: bool) -> None:
        if not self.routed:
            self.check_final_prefixes(sample)
            self.check_feedings(sample, well_formed)
        self.check_through_stages(sample, well_formed)

    def check_final_prefixes(self, sample: str) -> None:
        """Check 1 (and 5): a fresh driver fed any prefix with ``final=True`` ends within it, accounting for it."""
        for i in range(1, len(sample) + 1):
            prefix = sample[:i]
            split = f"the prefix [:{i}] (ending {_clip(prefix[-30:])}) fed with final=True"
            self.check_raw(prefix, self.feed(prefix, [prefix], split), split)  # feed() checks done and the range

    def marker_cuts(self, text: str) -> list[int]:
        cuts: set[int] = set()
        for m in self.markers:
            i = text.find(m)
            while i >= 0:
                cuts.update((i, i + len(m)))
                i = text.find(m, i + 1)
        return sorted(cuts)

    def check_feedings(self, sample: str, well_formed: bool) -> None:
        """Checks 2-5 at the driver level, on the sample followed by :data:`TRAILING`."""
        text = sample + TRAILING
        n = len(sample)
        whole = self.feed(text, [text], "whole")
        last = whole.ends[-1] if whole.ends else -1
        calls = _calls(whole.events)
        if self.owns_output:
            # The block lasts to the end of the output: the trailing text is passed on as plain text.
            if not calls[-1][1].endswith(TRAILING) or last != len(text):
                self.fail("whole", f"the trailing text is not passed on as text (text events: {_clip(calls[-1][1])})")
        elif last > (skip_json_ws(text, n) if self.trailing_blanks else n):
            self.fail("whole", f"the block ends at {last}, past the sample's end {n}: it took {_clip(text[n:last])}")
        if well_formed:
            aborted = [c for c in calls[:-1] if c[8]]
            text_events = calls[-1][1][: -len(TRAILING)] if self.owns_output else calls[-1][1]
            if (last < n and not self.owns_output) or aborted or text_events:
                self.fail(
                    "whole",
                    f"a well-formed sample is not read whole: the blocks end at {whole.ends} (the sample at {n}), "
                    f"aborted calls {aborted}, text {_clip(text_events)}",
                )
        self.check_raw(text, whole, "whole")
        if well_formed and not self.owns_output:
            split = "whole, with final=False"
            open_ended = self.feed(text, [text], split, limits=whole.ends, finish=False)
            if open_ended.ends != whole.ends:
                self.fail(split, f"the blocks that end are {open_ended.ends}, with final=True {whole.ends}: the text "
                          "after the sample shows the block is over, no final=True needed")
        cuts = self.marker_cuts(text)
        splits: list[tuple[str, list[str]]] = [
            ("whole, then final", [text, ""]),
            ("one character at a time", [*text, ""]),
            (f"split at the marker boundaries {_clip(str(cuts), 200)}", [*split_at(text, cuts), ""]),
        ]
        splits += [(f"split at the marker boundary {c} alone", [*split_at(text, [c]), ""]) for c in cuts]
        for s in self.seeds:
            chunks = random_chunks(text, s)
            at = list(itertools.accumulate(map(len, chunks[:-1])))
            splits.append((f"split at random (seed {s}) at {_clip(str(at), 200)}", [*chunks, ""]))
        for split, chunks in splits:
            run = self.feed(text, chunks, split, limits=whole.ends)
            if run.ends != whole.ends:
                self.fail(split, f"the blocks end at {run.ends}, in the whole run at {whole.ends}")
            self.check_raw(text, run, split)
            got = _calls(run.events)
            if got != calls:
                diff = next(((a, b) for a, b in zip(got, calls, strict=False) if a != b), (got, calls))
                self.fail(split, f"the driver's events differ from the whole run's: {diff[0]!r} != {diff[1]!r}")
            if split == "one character at a time":
                self.check_held(text, run, split)
        # Text before start is neither consumed nor attributed; blanks after start, before the opener, are
        # consumed as the call's (the feeder hands them over between two blocks). Not for a driver that owns
        # the output: its first line is its first message's recipient.
        blanks = "" if self.owns_output else _BLANKS
        pre = _PREFIX + blanks + text
        shift = len(_PREFIX) + len(blanks)
        split = f"whole, after {len(_PREFIX)} characters before start and {blanks!r} after it"
        shifted = self.feed(pre, [blanks + text], split, start=len(_PREFIX))
        self.check_raw(pre, shifted, split, start=len(_PREFIX))
        if [e - shift for e in shifted.ends] != whole.ends:
            self.fail(split, f"the blocks end at {shifted.ends}, without the text before the opener at {whole.ends}")
        # Compared without raw text (the blanks are in it); blanks surfaced on their own (before a block that
        # holds no call: Kimi K3's framing) are text, not a difference.
        got = [c[:5] + c[7:] if c[0] != "text" else c for c in _calls(shifted.events) if not _blank_surface(c)]
        if got != [c[:5] + c[7:] if c[0] != "text" else c for c in calls]:
            self.fail(split, f"the events differ from the whole run without the text before the opener: {got!r}")

    def check_held(self, text: str, run: _Run, split: str) -> None:
        """Check 3: neither the caller's tail nor the text no event accounts for yet reaches the bound."""
        bound = f"the bound is {self.bound}: the longest marker + HELD_SLACK ({HELD_SLACK})"
        if run.max_held >= self.bound:
            self.fail(
                split,
                f"the caller holds {run.max_held} unconsumed characters by {run.held_at} ({bound}): "
                f"{_clip(run.held_text)}",
            )
        if run.max_unreleased >= self.bound:
            at = run.unreleased_at
            self.fail(
                split,
                f"{run.max_unreleased} characters fed by {at} are accounted for by no event yet ({bound}): "
                f"{_clip(text[at - run.max_unreleased : at])}",
            )

    def check_through_stages(self, sample: str, well_formed: bool) -> None:
        """Checks 2 and 4 after the stages: parse_complete against streamed rebuilds, and the trailing text."""
        kw: dict[str, Any] = {"tool_parser": self.name, "tools": self.tools}
        for text in (sample, sample + TRAILING):
            try:
                full = check_chunkings(text, seeds=self.seeds, **kw)
            except AssertionError as e:
                self.fail("through the stages (whole, one character at a time, at random)", str(e))
            want = message_key(full)
            cuts = self.marker_cuts(text)
            for chunking, points in itertools.product(("any", "tokens"), (cuts, *([c] for c in cuts))):
                got = message_key(accumulate(feed_chunks(split_at(text, points), chunking=chunking, **kw)))
                if got != want:
                    self.fail(
                        f"through the stages, chunking={chunking!r}, split at the marker boundaries {points}",
                        f"{got!r} != parse_complete's {want!r}",
                    )
        alone = message_key(parse_complete(sample, **kw))
        with_tail = message_key(parse_complete(sample + TRAILING, **kw))
        if with_tail[2] != alone[2] or not (with_tail[0] or "").endswith(TRAILING.lstrip()):
            self.fail(
                "through the stages, followed by the trailing text",
                f"the calls changed, or the content does not end with the trailing text: {with_tail!r}, "
                f"without it {alone!r}",
            )
        if well_formed and alone[0]:
            self.fail("through the stages", f"a well-formed sample leaves content {alone[0]!r}")
        # The output cut short (the stream stopped in the block): streamed, it rebuilds what parse_complete gives.
        for i in range(1, len(sample), max(1, len(sample) // self.cut_outputs)):
            try:
                check_chunkings(sample[:i], seeds=self.seeds[:1], **kw)
            except AssertionError as e:
                self.fail(f"through the stages, the output cut at {i}", str(e))


def check_tool_dialect(
    name: str,
    samples: Iterable[str],
    *,
    malformed: Iterable[str] = (),
    tools: Iterable[Any] | None = None,
    dropped: Iterable[str] = (),
    random_splits: int = 3,
    seed: int = 0,
    cut_outputs: int = 40,
) -> None:
    """Run the driver contract of the registered tool dialect ``name`` on sample outputs.

    Each sample is text starting at the dialect's opener: one block, or several
    separated by blanks as the format writes them. A sample must be complete (its
    meaning may not depend on what follows it: not Mistral's bare
    ``[TOOL_CALLS]NAME``, a call only at the end of the output) and must not
    contain a marker as value text. The checks put :data:`TRAILING` after it where
    they need text past the block, and feed drivers as the tool feeder does: each
    chunk appended to the unconsumed tail, a driver's first feed holding its whole
    opener, a fresh driver for a block that follows another after blanks. For
    every sample:

    1. *final ends the block*: for every prefix, a fresh driver
       (``dialect.factory(DriverContext(...))``) fed the prefix with
       ``final=True`` is ``done`` and returns at most ``len(prefix)``;
    2. *nothing past the block is consumed*: followed by :data:`TRAILING`,
       whole or split, no feed returns a position past where the whole-text
       run ended the block (the same block ends on every split), and that end
       is at most the sample's end (or in the blanks right after it where the
       format declares them the block's framing: ``trailing_blanks``, ERNIE);
       after the stages, the calls are those of the sample alone and the
       content ends with the trailing text. A well-formed sample (``samples``,
       not ``malformed``) is also read whole: the blocks end at its end, also
       when fed with ``final=False`` (the trailing text shows they are over),
       no call aborts, no text is passed on, no content is left;
    3. *the held tail is bounded*: fed one character at a time, the unconsumed
       tail the caller must hold (``len(text_so_far) - consumed``) and, more
       strictly, the text fed that no event accounts for yet (the caller's
       tail plus what the driver consumed but did not release) stay under the
       longest marker + :data:`HELD_SLACK` (600) characters, except while a
       value that needs whole conversion is open (a Python literal, an untyped
       XML scalar, a stringified arguments object): keep such values short,
       and make other values long (a string longer than the bound) for this
       check to bite;
    4. *the three feedings agree*: whole, one character at a time, split at
       every marker boundary (all at once, and each alone) and at
       ``random_splits`` random splits into chunks of 1-8 characters (seeded
       from ``seed``) give the same driver events (per call: names, ids, the
       concatenated arguments, raw and surfaced text, ends, abort; and the plain
       text) and the same block ends; after the stages, they give the message
       :func:`~deltaflow.parse_complete` gives (:func:`~deltaflow.testing.check_chunkings`,
       and the marker-boundary splits with ``chunking="any"`` and ``"tokens"``),
       also for the output cut short at ``cut_outputs`` evenly spaced points;
    5. *raw attribution accounts for the text*: the concatenated ``raw`` of all
       events (and the text of plain-text events) plus the unconsumed rest is
       the input (less the ``dropped`` framing), on every feeding, the prefixes
       fed with ``final=True`` included;

    and text before ``start`` is neither consumed nor attributed, while blanks
    between ``start`` and the opener are consumed and attributed (as the feeder
    hands them over between two blocks): the whole run again, after text the
    driver is told to start past and blanks.

    Dialects that need care:

    * a dialect whose openers come from the request (``xml_tools``) needs
      ``tools`` (ValueError otherwise); ``tools`` also go to the driver context
      and the stages (schema-driven typing, the name filter);
    * a dialect whose driver owns the whole output (``start_openers``
      containing ``""``, Functionary v3.2) never ends its block before the
      output does: check 2 becomes "the trailing text is passed on as plain
      text";
    * framing a driver consumes and attributes to nothing by declaration (Kimi
      K3's response and message markers, Functionary v3.2's ``all`` recipient
      line) is passed as ``dropped``;
    * a dialect without any opener (``openai``) is routed by the channel
      router: its driver reads only the call bodies that the Harmony router
      opened for it (``HarmonyCallDriver.open_call``, not part of the driver
      contract), so it cannot be fed from a sample. Its samples (whole Harmony
      outputs) are checked through the stages only: checks 2 and 4 there.

    Args:
        name: the registered tool dialect.
        samples: well-formed sample outputs.
        malformed: malformed sample outputs (all checks but "read whole").
        tools: the request's tool definitions (OpenAI or Anthropic style).
        dropped: framing the driver drops by declaration (see above).
        random_splits: how many random splits per sample (chunks of 1-8 characters).
        seed: the first random seed.
        cut_outputs: about how many cut-short outputs per sample are checked through the stages.

    Raises:
        AssertionError: a contract violation; the message names the dialect,
            the sample and the split.
        ValueError: no samples, or no tools for a dialect that needs them.
    """
    checker = _Checker(
        get_tool_dialect(name), tools, dropped=dropped, random_splits=random_splits, seed=seed, cut_outputs=cut_outputs
    )
    todo = [("sample", i, s, True) for i, s in enumerate(samples)]
    todo += [("malformed sample", i, s, False) for i, s in enumerate(malformed)]
    if not todo:
        raise ValueError(f"no samples for tool dialect {name!r}")
    for kind, i, sample, well_formed in todo:
        checker.label = f"{kind} {i} {_clip(sample)}"
        checker.check_sample(sample, well_formed)
