"""Read a YAML document into plain data while remembering where every value sits.

PyYAML's ``safe_load`` throws positions away, yet every error the user sees has
to say ``FILE:LINE:COL``. So the document is composed into PyYAML's node graph
and converted by hand, recording the mark of each key and value under its path.
The conversion also rejects what ``safe_load`` silently accepts: duplicate keys
(the last one would win) and non-string keys. Alias expansion is bounded, so a
"billion laughs" document is an error instead of an out-of-memory kill.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from provision.spec.issues import Location, SpecError, SpecIssue

#: Specs are hand-written text; anything larger is a mistake (a dump, a binary).
MAX_SPEC_BYTES = 4 * 1024 * 1024
#: Values visited while converting; bounds alias expansion.
MAX_NODES = 200_000

Path_ = tuple[str | int, ...]


@dataclass
class SourceMap:
    """Where each path of the document was written (1-based line and column)."""

    file: str
    values: dict[Path_, Location] = field(default_factory=dict)
    keys: dict[Path_, Location] = field(default_factory=dict)
    quoted: dict[Path_, bool] = field(default_factory=dict)

    def locate(self, path: Path_, *, prefer_key: bool = False) -> Location:
        """The closest recorded position for ``path`` (walking up to its parents)."""
        for length in range(len(path), -1, -1):
            prefix = path[:length]
            table = (self.keys, self.values) if prefer_key else (self.values, self.keys)
            for positions in table:
                if prefix in positions:
                    return positions[prefix]
        return Location(self.file, 1, 1)

    def column_inside(self, path: Path_, offset: int) -> Location:
        """Position of character ``offset`` (1-based) inside the scalar at ``path``."""
        base = self.locate(path)
        shift = 1 if self.quoted.get(path) else 0
        return Location(base.file, base.line, base.column + shift + offset - 1)


def read_document(raw: bytes, file: str, *, size: int | None = None) -> tuple[Any, SourceMap]:
    """Decode, parse and convert ``raw``; raise :class:`SpecError` with a location.

    ``size`` is the file's real size when only its first bytes were read.
    """
    source = SourceMap(file)
    size = len(raw) if size is None else size
    if size > MAX_SPEC_BYTES:
        _fail(file, 1, 1, f"file is {size / 1e6:.1f} MB; a cluster spec is at most {MAX_SPEC_BYTES // 2**20} MiB")
    if not raw.strip():
        _fail(
            file, 1, 1, "file is empty; a cluster spec needs at least the cluster, nodes, hardware and fabric sections"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line, column = _position_of_offset(raw, error.start)
        _fail(file, line, column, "not UTF-8 text (is this a binary file?)")
    if "\x00" in text:
        line, column = _position_of_offset(raw, raw.index(b"\x00"))
        _fail(file, line, column, "contains a NUL byte (is this a binary file?)")
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as error:
        _reject_character(file, text, error)
    try:
        root = loader.get_single_node()
        if root is None:
            _fail(file, 1, 1, "file holds no YAML document")
        data = _Converter(loader, source).convert(root, ())
    except yaml.reader.ReaderError as error:
        _reject_character(file, text, error)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = error.problem or error.context or "invalid YAML"
        _fail(file, line, column, f"invalid YAML: {problem}")
    except yaml.YAMLError as error:
        _fail(file, 1, 1, f"invalid YAML: {error}")
    finally:
        loader.dispose()
    return data, source


class _Converter:
    def __init__(self, loader: yaml.SafeLoader, source: SourceMap) -> None:
        self.loader = loader
        self.source = source
        self.visited = 0

    def convert(self, node: Node, path: Path_) -> Any:
        self.visited += 1
        if self.visited > MAX_NODES:
            _fail(
                self.source.file,
                node.start_mark.line + 1,
                node.start_mark.column + 1,
                f"document expands to more than {MAX_NODES:,} values (alias bomb?)",
            )
        self.source.values.setdefault(path, _location(self.source.file, node))
        if isinstance(node, ScalarNode):
            self.source.quoted[path] = node.style in ("'", '"')
            return self.loader.construct_object(node, deep=True)
        if isinstance(node, SequenceNode):
            return [self.convert(item, (*path, index)) for index, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        raise AssertionError(f"unexpected YAML node {node!r}")

    def _mapping(self, node: MappingNode, path: Path_) -> dict[str, Any]:
        self.loader.flatten_mapping(node)  # resolves "<<" merge keys
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.loader.construct_object(key_node, deep=True) if isinstance(key_node, ScalarNode) else None
            if not isinstance(key, str | int) or isinstance(key, bool):
                _fail(
                    self.source.file,
                    key_node.start_mark.line + 1,
                    key_node.start_mark.column + 1,
                    f"keys must be plain names, not {type(key).__name__ if key is not None else 'a collection'}",
                )
            key = str(key)
            child = (*path, key)
            if key in result:
                first = self.source.keys[child]
                _fail(
                    self.source.file,
                    key_node.start_mark.line + 1,
                    key_node.start_mark.column + 1,
                    f"duplicate key {key!r} (first written at line {first.line})",
                )
            self.source.keys[child] = _location(self.source.file, key_node)
            result[key] = self.convert(value_node, child)
        return result


def _reject_character(file: str, text: str, error: yaml.reader.ReaderError) -> None:
    line, column = _position_of_offset(text.encode(), len(text[: error.position].encode()))
    _fail(file, line, column, f"character U+{error.character:04X} is not allowed in YAML")


def _location(file: str, node: Node) -> Location:
    return Location(file, node.start_mark.line + 1, node.start_mark.column + 1)


def _position_of_offset(raw: bytes, offset: int) -> tuple[int, int]:
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return line, column


def _fail(file: str, line: int, column: int, message: str) -> NoReturn:
    raise SpecError([SpecIssue(Location(file, line, column), "", message)])
