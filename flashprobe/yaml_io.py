"""Reading YAML users write: safe loading, YAML 1.2 numbers, one-line errors naming the file.

Hostile or broken input is refused before it can cost memory or hide a mistake: a document is
at most MAX_BYTES long, expands (aliases followed) to at most MAX_NODES nodes and nests at most
MAX_DEPTH levels (an alias bomb, "billion laughs", is a few hundred bytes that expand to
billions of nodes once anything walks it), and a mapping may not repeat a key (PyYAML keeps the
last silently, so a second `seeds:` would quietly replace the first).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from flashprobe.errors import FlashprobeError

MAX_BYTES = 1 << 20  # suites are a few kB; suite.json files some tens of kB
MAX_NODES = 100_000  # after following aliases
MAX_DEPTH = 64
_MERGE = "tag:yaml.org,2002:merge"


_BOOL, _INT, _FLOAT = (f"tag:yaml.org,2002:{kind}" for kind in ("bool", "int", "float"))


class SafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader with YAML 1.2's booleans and numbers instead of YAML 1.1's.

    PyYAML follows YAML 1.1, which reads `4:5` as 245 (base 60), `020` as 16 (octal) and `yes`,
    `on` as true, and whose float pattern needs a dot (`1.0e-3`), so `lr: 1e-3` would arrive as
    the string '1e-3'. YAML 1.2's core schema (what every user means) reads `true`/`false`,
    decimal integers (`_` separators kept, as Python allows), `0x`/`0o` integers, and floats
    with or without a dot; anything else is a string, which the field's check then refuses.
    """


SafeLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
SafeLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
SafeLoader.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
SafeLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _construct_int(loader: SafeLoader, node: ScalarNode) -> int:
    text = str(loader.construct_scalar(node)).replace("_", "")
    if text.startswith(("0x", "0o")):
        return int(text, 0)
    return int(text, 10)  # `020` is 20: no YAML 1.1 octal


SafeLoader.add_constructor(_INT, _construct_int)


def load_yaml(text: str) -> Any:
    """Parse YAML text safely (no code runs), with YAML 1.2 floats and the limits above.

    Raises yaml.YAMLError for malformed text and FlashprobeError (naming the line) for a
    document over a limit or a repeated key.
    """
    if len(text) > MAX_BYTES:
        raise FlashprobeError(
            f"YAML document too large ({len(text)} characters; at most {MAX_BYTES})"
        )
    loader = SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_node(loader, node)
            return loader.construct_document(node)
        except RecursionError:
            raise FlashprobeError(f"YAML nested too deeply (at most {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path, what: str) -> Any:
    """The parsed content of `path` (safe_load: no code runs); `what` names it in errors."""
    path = Path(path)
    if path.is_dir():
        raise FlashprobeError(f"{what} file is a folder: {path}")
    if path.exists() and not path.is_file():
        raise FlashprobeError(f"{what} file is not a regular file: {path}")
    if not path.is_file():
        raise FlashprobeError(f"{what} file not found: {path}")
    try:
        with path.open("rb") as handle:
            blob = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise FlashprobeError(f"cannot read {what} file {path}: {exc.strerror}") from None
    if len(blob) > MAX_BYTES:
        raise FlashprobeError(f"{what} file {path} is larger than {MAX_BYTES} bytes")
    try:
        text = blob.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FlashprobeError(f"{what} file {path} is not UTF-8 text (byte {exc.start})") from None
    try:
        return load_yaml(text)
    except FlashprobeError as exc:
        raise FlashprobeError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise FlashprobeError(f"malformed YAML in {path}{where}") from None


def _check_node(loader: SafeLoader, root: Node) -> None:
    """Count the nodes `root` expands to, and refuse repeated keys, before anything is built.

    Each node is visited once (its expanded size is remembered), so a bomb costs its own size
    to check; a node that contains itself (`&a [*a]`) expands forever and is refused.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Node, depth: int) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        line = node.start_mark.line + 1
        if depth > MAX_DEPTH:
            raise FlashprobeError(f"YAML nested deeper than {MAX_DEPTH} levels (line {line})")
        if id(node) in open_nodes:
            raise FlashprobeError(f"YAML alias refers to itself (line {line})")
        open_nodes.add(id(node))
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, MappingNode):
            _check_keys(loader, node)
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        open_nodes.discard(id(node))
        if total > MAX_NODES:
            raise FlashprobeError(
                f"YAML expands to more than {MAX_NODES} values (aliases followed; line {line})"
            )
        sizes[id(node)] = total
        return total

    size(root, 0)


def _check_keys(loader: SafeLoader, node: MappingNode) -> None:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
            continue  # `<<: *base` merges may override keys: that is what they are for
        key = loader.construct_object(key_node)
        try:
            repeated = key in seen
            seen.add(key)
        except TypeError:
            continue  # unhashable: the constructor reports it
        if repeated:
            raise FlashprobeError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
