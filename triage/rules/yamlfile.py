"""YAML with line numbers and limits: how a rule file is read when the cache has no entry for it.

Imported only then: a scan whose rule files are all in the cache never loads PyYAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from triage.rules.ruleset import MAX_YAML_DEPTH, MAX_YAML_VALUES, LineDict, RuleError

_CParser: Any
try:  # libyaml's parser when present: its events come much faster; composing stays here, with the limits
    from yaml._yaml import CParser as _CParser

    _LOADER_BASES: tuple = (yaml.composer.Composer, _CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver)
except ImportError:  # pragma: no cover - PyYAML without libyaml
    _CParser = None
    _LOADER_BASES = (yaml.SafeLoader,)


class _Loader(*_LOADER_BASES):  # type: ignore[misc]
    """The safe loader, with depth and alias-expansion limits checked while composing."""

    def __init__(self, stream: str):
        if _CParser is None:
            yaml.SafeLoader.__init__(self, stream)
        else:
            _CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"refused: nested deeper than {MAX_YAML_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        _expanded_size(node, {}, set())
        return node


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many values the node becomes once aliases are expanded; refuses bombs and loops."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise yaml.composer.ComposerError(None, None, "refused: an alias refers to itself", node.start_mark)
    open_nodes.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = []
    for child in children:
        size += _expanded_size(child, sizes, open_nodes)
        if size > MAX_YAML_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"refused: aliases expand to more than {MAX_YAML_VALUES:,} values", node.start_mark
            )
    open_nodes.discard(key)
    sizes[key] = size
    return size


def _refuse_tag(loader: _Loader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"refused: tag {node.tag!r} is not allowed; a rule file holds plain data only", node.start_mark
    )


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    mapping = LineDict(yaml.SafeLoader.construct_mapping(loader, node, deep=True))
    mapping.line = node.start_mark.line + 1
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(None, _refuse_tag)  # any tag the safe loader does not know


class _BuiltinLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Our own rule files: libyaml's parser when present (8x faster: it is most of the start-up)."""


_BuiltinLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: Path, text: str, builtin: bool = False) -> Any:
    try:
        return yaml.load(text, Loader=_BuiltinLoader if builtin else _Loader)  # noqa: S506 - both are safe loaders
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        problem = exc.problem or exc.context
        if problem and "maximum nesting depth" in problem:  # libyaml's own limit, met while reading ahead
            problem = f"refused: nested deeper than {MAX_YAML_DEPTH} levels"
        raise RuleError(f"{path}:{line}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise RuleError(f"{path}:0: not valid YAML: {exc}") from None
