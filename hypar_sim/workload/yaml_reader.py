"""Reading YAML input safely: numbers as people write them, duplicate keys refused, alias
bombs and oversized files refused before they cost memory, every error one line with its
line and column (`read_yaml`, used for networks, hardware and topology files)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from hypar_sim.errors import InputError

#: Most nodes the aliases of a YAML document may add to it (a "billion laughs" file of 400
#: bytes expands to 10**9): far above any network's use of aliases.
MAX_YAML_NODES = 1_000_000


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml when present: 10x faster
    """YAML 1.1 reads 2e1 and 1.6e9 as strings (its floats need a dot and a signed
    exponent); people write them as numbers, so they are numbers here. A key given twice
    in one mapping is refused (YAML says keys are unique; PyYAML keeps the last), and so is
    a document whose aliases add more than `MAX_YAML_NODES` nodes to it, or refer to a
    node that contains them (`_check_expansion`)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.tags: dict = {}
        self.may_alias = "&" in stream  # an alias names an anchor (&name); none, no alias

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        """The tag of a node, as PyYAML's resolver gives it, remembered per scalar text: a
        chain repeats its keys and values ("type", "conv", "3") on every layer, and the
        regular expressions behind each took a quarter of a large file's reading."""
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = self.tags.get(key)
        if tag is None:
            tag = self.tags[key] = super().resolve(kind, value, implicit)
        return tag

    def construct_document(self, node: yaml.Node) -> Any:
        if self.may_alias:
            _check_expansion(node)
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen and key_node.tag != "tag:yaml.org,2002:merge":
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key '{key_node.value[:40]}' given twice in one mapping",
                        key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep)


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases add more than `MAX_YAML_NODES` nodes to it, each
    alias counted as the subtree it stands for (sizes memoised per node: linear in the
    file). A large file without aliases, such as a 100,000-layer chain of 1.1 million
    nodes, expands to itself and passes."""
    sizes: dict[int, int] = {}
    large: list[yaml.Node] = []  # nodes already past the bound, innermost first
    open_: set[int] = set()  # nodes whose children are being sized: one of them again is a loop
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = [n for pair in node.value for n in pair] \
            if isinstance(node, yaml.MappingNode) else \
            list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if not done and any(id(c) not in sizes for c in children):
            if id(node) in open_:  # reached again inside itself: `a: &x [*x]`
                raise yaml.constructor.ConstructorError(
                    None, None, "an alias refers to a node that contains it (a recursive "
                    "YAML structure has no end)", node.start_mark)
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(c), 1) for c in children)
        if sizes[id(node)] > MAX_YAML_NODES:
            large.append(node)
    written = len(sizes)  # the nodes the file holds, each once
    for node in large:
        if sizes[id(node)] > MAX_YAML_NODES + written:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases expand it by more than {MAX_YAML_NODES:,} nodes "
                "(a YAML alias bomb?)", node.start_mark)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


#: Largest network or configuration file read (bytes): a 100,000-layer chain is 8 MB.
MAX_YAML_BYTES = 256 * 2**20


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; syntax errors become one-line InputErrors with line and column. A
    file larger than MAX_YAML_BYTES, or an ONNX model's weights file, is refused unread."""
    if path.name.endswith(".onnx.data") or path.suffix == ".data":
        raise InputError(f"{path}: the external data (weights) of an ONNX model, not a "
                         "network; give its .onnx file")
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise InputError(f"{path}: {path.stat().st_size:,} bytes; a network or "
                             f"configuration file has at most {MAX_YAML_BYTES:,}")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None
    try:
        loader = _Loader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        kind = "" if isinstance(exc, yaml.constructor.ConstructorError) else "syntax "
        raise InputError(f"{path}: YAML {kind}error{where}: {problem}") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        raise InputError(f"{path}: YAML error: {str(exc).split(';')[0][:120]}") from None
