"""The exception tree, and errors.py's drawing of it."""

from __future__ import annotations

import builtins
import importlib
import pkgutil
import re
from dataclasses import dataclass

import pytest

import deltaflow
import deltaflow.errors
from deltaflow import DeltaflowError, StateError, ToolSpecError, UnknownParserError
from deltaflow.errors import StageError


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [(UnknownParserError, ValueError), (ToolSpecError, ValueError), (StateError, RuntimeError)],
    ids=lambda x: x.__name__,
)
def test_errors_derive_from_root_and_builtin(cls: type[Exception], builtin: type[Exception]) -> None:
    """Every error derives from DeltaflowError and from the builtin it mirrors."""
    assert issubclass(cls, DeltaflowError)
    assert issubclass(cls, builtin)


def test_stage_error_is_a_deltaflow_error() -> None:
    """StageError derives from DeltaflowError and names the stage."""
    err = StageError("tools")
    assert isinstance(err, DeltaflowError) and err.stage == "tools" and "tools" in str(err)


def test_unknown_parser_error_attributes() -> None:
    """UnknownParserError carries kind, name and the sorted registered names, and lists them in its message."""
    err = UnknownParserError("tool", "nope", ["b", "a"])
    assert (err.kind, err.name, err.available) == ("tool", "nope", ("a", "b"))
    assert str(err) == "unknown tool parser 'nope'; registered tool parsers: a, b"


def test_tool_spec_error_index() -> None:
    """ToolSpecError carries the offending index (None by default)."""
    assert ToolSpecError("x", index=3).index == 3
    assert ToolSpecError("x").index is None


def test_feed_after_final_is_a_state_error() -> None:
    """Feeding a parser after final=True raises StateError (also catchable as RuntimeError)."""
    p = deltaflow.ResponseParser("hermes")
    p.feed("hi", final=True)
    with pytest.raises(RuntimeError, match="after final=True"):
        p.feed("more")
    with pytest.raises(StateError):
        p.feed("", final=True)


def test_public_errors_are_exported() -> None:
    """The public errors are importable from deltaflow and present themselves as deltaflow's."""
    for cls in (DeltaflowError, UnknownParserError, ToolSpecError, StateError):
        assert getattr(deltaflow, cls.__name__) is cls
        assert cls.__module__ == "deltaflow"


# --------------------------------------------------------------------------- the drawn tree is the real one


def _package_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class deltaflow defines, by name, after importing every deltaflow module.

    ``deltaflow.__main__`` is left out: importing it runs the command line.
    """
    for info in pkgutil.walk_packages(deltaflow.__path__, "deltaflow."):
        if info.name != "deltaflow.__main__":
            importlib.import_module(info.name)
    found: dict[str, type[BaseException]] = {}
    todo: list[type[BaseException]] = [BaseException]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("deltaflow"):
            assert found.setdefault(cls.__name__, cls) is cls, f"two exception classes named {cls.__name__}"
    return found


@dataclass(frozen=True)
class Drawn:
    """One class as errors.py's docstring draws it."""

    name: str
    parent: str | None  # the class above it in the tree; None for the root and the internal list
    builtins: tuple[str, ...]  # the builtins named in parentheses
    module: str | None  # the module named before the description's colon, when the name is not exported


_ENTRY = re.compile(
    r"^(?P<prefix>[ │]*(?:[├└]── )?)(?P<name>[A-Za-z_]\w*)(?: \((?P<builtins>[\w, ]+)\))?"
    r"(?:\s{2,}(?:(?P<module>deltaflow(?:\.\w+)+): )?.*)?$"
)


def _literal_blocks(doc: str) -> list[list[str]]:
    """The docstring's reST literal blocks (the indented lines after a line ending with ``::``), dedented."""
    blocks: list[list[str]] = []
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if not line.rstrip().endswith("::"):
            continue
        block: list[str] = []
        for nxt in lines[i + 1 :]:
            if nxt.strip() and not nxt.startswith("    "):
                break
            if nxt.strip():
                block.append(nxt[4:])
        blocks.append(block)
    return blocks


def _drawn() -> tuple[dict[str, Drawn], dict[str, Drawn]]:
    """The tree (first literal block) and the internal list (second) of errors.py's docstring."""
    doc = deltaflow.errors.__doc__
    assert doc is not None
    blocks = _literal_blocks(doc)
    assert len(blocks) == 2, "errors.py's docstring draws the tree, then lists the internal exceptions"
    tree: dict[str, Drawn] = {}
    path: list[str] = []  # the names above the current line, one per depth
    for line in blocks[0]:
        m = _ENTRY.match(line)
        assert m, f"not a tree line: {line!r}"
        depth = len(m["prefix"]) // 4  # "" for the root, " ├── " under it, " │    └── " one deeper
        del path[depth:]
        assert len(path) == depth and (depth > 0) == (len(tree) > 0), f"misdrawn tree line: {line!r}"
        parent = path[-1] if path else None
        mirrored = tuple(b.strip() for b in m["builtins"].split(",")) if m["builtins"] else ()
        assert m["name"] not in tree, f"{m['name']} is drawn twice"
        tree[m["name"]] = Drawn(m["name"], parent, mirrored, m["module"])
        path.append(m["name"])
    internal: dict[str, Drawn] = {}
    for line in blocks[1]:
        m = _ENTRY.match(line)
        assert m and not m["prefix"], f"not an internal-list line: {line!r}"
        internal[m["name"]] = Drawn(m["name"], None, (), m["module"])
    return tree, internal


def test_the_tree_parser_reads_nesting() -> None:
    """The docstring parser tells depth from the box drawing (a nested class gets its parent)."""
    m = _ENTRY.match(" │    └── Inner (ValueError)   deltaflow.x.y: what")
    assert m is not None
    assert (m["name"], len(m["prefix"]) // 4, m["builtins"], m["module"]) == ("Inner", 2, "ValueError", "deltaflow.x.y")


def test_every_public_exception_is_drawn_in_the_tree_and_derives_from_the_root() -> None:
    """Each public exception class of the package is in errors.py's tree and derives from DeltaflowError.

    Public: a name without a leading underscore that the docstring's internal list does not name.
    """
    tree, internal = _drawn()
    public = {n: c for n, c in _package_exceptions().items() if not n.startswith("_") and n not in internal}
    assert sorted(set(public) - set(tree)) == [], "exception classes missing from errors.py's tree"
    for name, cls in public.items():
        assert issubclass(cls, DeltaflowError), f"{name} does not derive from DeltaflowError"


def test_the_tree_lists_only_real_classes_with_their_real_bases() -> None:
    """Every drawn class exists; its direct bases are exactly the parent and the builtins drawn; its module is right."""
    tree, internal = _drawn()
    real = _package_exceptions()
    assert sorted(set(tree) - set(real)) == [], "errors.py's tree draws classes that do not exist"
    assert sorted(set(internal) - set(real)) == [], "errors.py's internal list names classes that do not exist"
    assert list(tree)[0] == "DeltaflowError"
    for d in tree.values():
        cls = real[d.name]
        above = real[d.parent] if d.parent is not None else Exception  # the root derives from Exception alone
        want = {above} | {_builtin(b) for b in d.builtins}
        assert set(cls.__bases__) == want, f"{d.name}: bases {cls.__bases__}, drawn {d.parent} {d.builtins}"
        _check_module(d, cls)
    for d in internal.values():
        cls = real[d.name]
        assert not issubclass(cls, DeltaflowError), f"{d.name} derives from DeltaflowError: draw it in the tree"
        _check_module(d, cls)


def _builtin(name: str) -> type[BaseException]:
    """The builtin exception class called ``name``."""
    cls = getattr(builtins, name, None)
    assert isinstance(cls, type) and issubclass(cls, BaseException), f"{name} is not a builtin exception"
    return cls


def _check_module(d: Drawn, cls: type[BaseException]) -> None:
    """A class named with its module lives there; one drawn without is exported from ``deltaflow``."""
    if d.module is not None:
        assert cls.__module__ == d.module, f"{d.name} lives in {cls.__module__}, drawn in {d.module}"
    else:
        assert getattr(deltaflow, d.name, None) is cls, f"{d.name} is not exported from deltaflow: name its module"
