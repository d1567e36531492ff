"""Reading YAML input safely: a SafeLoader that refuses what a scenario never needs.

Scenario, topology and ``--set`` values are read with :func:`load_yaml_text`, which is
``yaml.safe_load`` plus three limits, each a one-line :class:`~fabricsim.errors.ConfigError`
naming the file and line:

* **duplicate keys** in one mapping (YAML says keys are unique; PyYAML silently keeps the last);
  merge keys (``<<: *base``) may still be overridden;
* **nesting** deeper than :data:`MAX_DEPTH` levels (PyYAML's composer recurses: 20,000 levels
  are a RecursionError);
* **aliases** whose expansion exceeds :data:`MAX_EXPANDED_NODES` nodes in all (a "billion laughs"
  document: a few lines that stand for 10**9 strings, which any consumer that walks the data, such
  as an error message or a deep copy, then spends minutes and gigabytes on).

>>> load_yaml_text("a: 1\\nb: [x, y]\\n", "f.yaml")[0]
{'a': 1, 'b': ['x', 'y']}
>>> load_yaml_text("a: 1\\na: 2\\n", "f.yaml")
Traceback (most recent call last):
...
fabricsim.errors.ConfigError: f.yaml:2: a: duplicate key 'a' (first at line 1; allowed: each key once per mapping)
"""
from __future__ import annotations

from typing import Any

import yaml

from ..errors import ConfigError

#: deepest nesting of mappings and lists accepted (a scenario needs about 6)
MAX_DEPTH = 100
#: most nodes a document may stand for once its aliases are expanded
MAX_EXPANDED_NODES = 1_000_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


class BoundedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the limits of the module doc; ``source`` names the input in errors."""

    def __init__(self, stream, source: str = "<yaml>"):
        super().__init__(stream)
        self.source = source
        self._depth = 0

    def _error(self, message: str, node_or_mark=None, field: str | None = None) -> ConfigError:
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        return ConfigError(message, source=self.source, field=field,
                           line=mark.line + 1 if mark is not None else None)

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise self._error(f"nested more than {MAX_DEPTH} levels deep (allowed: at most "
                                  f"{MAX_DEPTH} levels of mappings and lists)", self.peek_event())
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def check_unique_keys(node: yaml.Node | None, source: str) -> None:
    """Raise a ConfigError naming the first key that appears twice in one mapping (its dotted
    path and line); merge keys (``<<``) are not counted, so merged values may be overridden."""
    from .scenario import format_field
    stack = [(node, ())] if node is not None else []
    seen_nodes: set[int] = set()
    while stack:
        n, path = stack.pop()
        if id(n) in seen_nodes:
            continue
        seen_nodes.add(id(n))
        if isinstance(n, yaml.SequenceNode):
            stack.extend((c, path + (i,)) for i, c in reversed(list(enumerate(n.value))))
        elif isinstance(n, yaml.MappingNode):
            first: dict = {}
            for k, v in n.value:
                if k.tag == _MERGE_TAG:
                    continue
                if isinstance(k, yaml.ScalarNode):
                    prev = first.setdefault((k.tag, k.value), k)
                    if prev is not k:
                        raise ConfigError(f"duplicate key {k.value!r} (first at line {prev.start_mark.line + 1}; "
                                          f"allowed: each key once per mapping)", source=source,
                                          field=format_field(path + (k.value,)), line=k.start_mark.line + 1)
            stack.extend((v, path + (getattr(k, "value", "?"),)) for k, v in reversed(n.value))


class _Unbounded(Exception):
    """Raised by :func:`expanded_shape`: the limit the document exceeds, and the node where."""

    def __init__(self, message: str, node: yaml.Node):
        super().__init__(message)
        self.node = node


def expanded_shape(node: yaml.Node | None, max_nodes: int = MAX_EXPANDED_NODES,
                   max_depth: int = MAX_DEPTH) -> tuple[int, int]:
    """``(nodes, depth)`` ``node`` stands for with every alias expanded, in time linear in the
    document's own size (a node shared through aliases is measured once). Raises
    :class:`_Unbounded` past ``max_nodes`` or ``max_depth``, or for an alias inside its own anchor."""
    shapes: dict[int, tuple[int, int]] = {}
    open_: set[int] = set()

    def shape(n, depth: int) -> tuple[int, int]:
        key = id(n)
        if key in open_:
            raise _Unbounded("an alias refers to the anchor it is inside (allowed: aliases of "
                             "complete values)", n)
        if key not in shapes:
            if depth > max_depth:
                raise _Unbounded(f"its aliases expand to more than {max_depth} levels of nesting "
                                 f"(allowed: at most {max_depth})", n)
            open_.add(key)
            if isinstance(n, yaml.SequenceNode):
                children = n.value
            elif isinstance(n, yaml.MappingNode):
                children = [c for kv in n.value for c in kv]
            else:
                children = []
            total, height = 1, 1
            for c in children:
                size, h = shape(c, depth + 1)
                total += size
                height = max(height, h + 1)
                if total > max_nodes:
                    raise _Unbounded(f"its aliases expand to more than {max_nodes:,} values (allowed: at "
                                     f"most {max_nodes:,}; write the values out or use fewer aliases)", n)
            open_.discard(key)
            shapes[key] = (total, height)
        total, height = shapes[key]
        if depth - 1 + height > max_depth:
            raise _Unbounded(f"its aliases expand to more than {max_depth} levels of nesting "
                             f"(allowed: at most {max_depth})", n)
        return total, height
    return (0, 0) if node is None else shape(node, 1)


def _compose_checked(text: str, source: str):
    """(data, node) of one YAML document under the limits; raises yaml.YAMLError for invalid YAML
    and ConfigError for the limits."""
    loader = BoundedSafeLoader(text, source)
    try:
        node = loader.get_single_node()
        check_unique_keys(node, source)
        try:
            expanded_shape(node)
        except _Unbounded as exc:
            raise ConfigError(str(exc), source=source, line=exc.node.start_mark.line + 1) from None
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, node


def load_yaml_text(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """Parse one YAML document -> (data, node tree for line numbers). Raises ConfigError for
    invalid YAML and for the limits of the module doc."""
    try:
        return _compose_checked(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"not valid YAML: {problem}", source=source,
                          line=mark.line + 1 if mark else None) from None


def load_yaml_value(text: str, source: str) -> Any:
    """A ``--set`` value: ``text`` read as YAML under the same limits, or the text itself when it
    is not valid YAML (``--set name=a: b``). Raises ConfigError for the limits."""
    try:
        return _compose_checked(text, source)[0]
    except yaml.YAMLError:
        return text
