"""Reading a YAML or JSON file a user hands ksched: bounded in every way a file can be.

Owns :func:`read_bounded` (at most a given number of bytes, whatever the path is: a
regular file, a pipe, ``/dev/zero``), :func:`decode` (UTF-8, or an error naming the
offset) and :func:`load_documents` (the documents of YAML or JSON text). Every reader of a
user's file (the configuration, a cluster file, a ``--metrics`` file, a shadow log) goes
through these, so none can hang, exhaust memory or end in a traceback.

Promises: YAML aliases cannot multiply a document (at most :data:`ALIAS_NODES` nodes
added by them, and none refer to themselves), a mapping names each key once, and
nesting too deep for the parsers is reported. Every failure is the caller's
:class:`~ksched.errors.KschedError` subclass, one line naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ksched.errors import KschedError

# What YAML aliases may add to a stream, in nodes (scalars, sequences, mappings), beyond the
# nodes written: enough for anchors used as templates, and a bound on what expanding them
# costs later (every node is walked, as pods or values, by whoever reads the document).
ALIAS_NODES = 100_000
# Files are read this much at a time (a NUL byte in the first refuses a device at once).
READ_CHUNK = 1 << 20
# An expanded size beyond this is not added up further (the sum only decides "too many").
_SIZE_CAP = 2**62
_MERGE = "tag:yaml.org,2002:merge"
_Loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_bounded(path: str | Path, limit: int, what: str, error: type[KschedError]) -> bytearray:
    """The bytes of text file ``path``, refused past ``limit``: at most ``limit + 1`` are ever
    read, so a device or pipe that never ends costs no more than a file of that size, and
    one that sends a NUL byte (``/dev/zero``, a binary file; never in YAML or JSON text)
    is refused at its first chunk."""
    data = bytearray()
    try:
        with open(path, "rb") as f:
            while len(data) <= limit:
                chunk = f.read(min(READ_CHUNK, limit + 1 - len(data)))
                if not chunk:
                    break
                if b"\0" in chunk:
                    raise error(f"{path}: not a text file (NUL byte at offset {len(data) + chunk.index(0)})")
                data += chunk
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror or err}") from None
    if len(data) > limit:
        raise error(f"{path}: over the {limit}-byte limit of a {what}")
    return data


def decode(data: bytes | bytearray, source: str, error: type[KschedError]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(
            f"{source}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})"
        ) from None


def load_documents(text: str, source: str, error: type[KschedError]) -> list[Any]:
    """The documents of ``text``: one JSON value where it opens with ``{`` or ``[``, else
    every YAML document (``---``-separated)."""
    if text.lstrip().startswith(("{", "[")):
        try:
            return [json.loads(text, object_pairs_hook=_unique_json_keys)]
        except json.JSONDecodeError as err:
            raise error(f"{source}: not valid JSON: {err}") from None
        except RecursionError:
            raise error(f"{source}: not valid JSON: nested too deeply") from None
        except _DuplicateKeyError as dup:
            raise error(f"{source}: not valid JSON: duplicate key {dup.key!r}") from None
    return list(_yaml_documents(text, source, error))


def load_document(text: str, source: str, error: type[KschedError]) -> Any:
    """The one document of ``text`` (None where it has none); a second one is an error."""
    docs = load_documents(text, source, error)
    if len(docs) > 1:
        raise error(f"{source}: expected one document, found {len(docs)}")
    return docs[0] if docs else None


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_json_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _yaml_documents(text: str, source: str, error: type[KschedError]) -> Iterator[Any]:
    loader = _BoundedLoader(text)
    try:
        while loader.check_data():
            yield loader.get_data()
    except _RefusedError as why:
        raise error(f"{source}: not valid YAML: {why}") from None
    except yaml.YAMLError as err:
        raise error(f"{source}: not valid YAML: {_one_line(err)}") from None
    except RecursionError:
        raise error(f"{source}: not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _one_line(err: yaml.YAMLError) -> str:
    """A parser's error as one line: what is wrong and where (its own text spans lines)."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem is None:
        return " ".join(str(err).split())
    where = (
        f" (line {err.problem_mark.line + 1}, column {err.problem_mark.column + 1})"
        if err.problem_mark
        else ""
    )
    context = f"{err.context}: " if err.context else ""
    return f"{context}{err.problem}{where}"


class _RefusedError(Exception):
    """A YAML stream the loader will not build: the message says why."""


class _BoundedLoader(_Loader):  # type: ignore[misc]
    """The safe loader, checking each document's node graph before building it: aliases
    add at most :data:`ALIAS_NODES` nodes to the stream, none refers to a node that holds
    it, and a mapping names each key once."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_nodes = 0

    def construct_document(self, node: yaml.Node) -> Any:
        expanded, written = _sizes(node)
        self.alias_nodes += expanded - written
        if self.alias_nodes > ALIAS_NODES:
            raise _RefusedError(
                f"aliases expand the document by more than {ALIAS_NODES} nodes "
                f"(near line {node.start_mark.line + 1})"
            )
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE:
                if (key.tag, key.value) in seen:
                    raise _RefusedError(f"duplicate key {key.value!r} (line {key.start_mark.line + 1})")
                seen.add((key.tag, key.value))
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _sizes(root: yaml.Node) -> tuple[int, int]:
    """How many nodes ``root`` has with every alias expanded, and how many are written (the
    distinct nodes), without expanding anything: each node's size is counted once, bottom up,
    and iteratively, as the document may be deep. An alias to a node that contains it
    (a recursive document) is refused: nothing that reads it would end."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        key = id(node)
        if counted:
            open_nodes.discard(key)
            sizes[key] = min(_SIZE_CAP, 1 + sum(sizes[id(c)] for c in _children(node)))
        elif key not in sizes:
            if key in open_nodes:
                raise _RefusedError(
                    f"an alias refers to a node that contains it (line {node.start_mark.line + 1})"
                )
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes[id(root)], len(sizes)
