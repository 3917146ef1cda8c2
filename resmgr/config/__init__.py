"""cri-resource-manager configuration: parsing and validation shared by cri-resmgr and the extension.

``validate_config_text`` checks a whole YAML config file; ``validate_config_sections``
checks the ConfigMap form, where each data key is a top-level section whose value
is that section's YAML. Both return the normalised mapping (canonical field
spellings, ``cpu`` constraints as ``cpuset:...``/``<n>m``, fields this cri-resmgr does
not apply and fields nobody knows left out) or raise ``ConfigError`` naming the
offending field. They log what was left out (logger ``resmgr.config``): unknown fields
as a warning with a "did you mean", ignored fields as what was accepted without being
applied, so cri-resmgr's log and the installer's say it. The ``check_config*`` variants
return them instead, for callers that report them elsewhere (the agent's node
annotations, the Extension's status), and the config's typed sections
(``CheckedConfig.sections``, ``resmgr.config.sections``) that the relay's settings and
the policies take.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import yaml

from resmgr.config.constraints import CpuConstraint, parse_cpu_constraint, parse_cpu_quantity, parse_memory_quantity
from resmgr.config.errors import ConfigError
from resmgr.config.schema import POLICY_NAMES, check
from resmgr.config.sections import ConfigSections
from resmgr.config.validation import MAX_DEPTH, MAX_NODES, ignored_summary, unknown_summary

__all__ = [
    "MAX_CONFIG_BYTES",
    "POLICY_NAMES",
    "CheckedConfig",
    "ConfigError",
    "ConfigSections",
    "CpuConstraint",
    "check_config",
    "check_config_sections",
    "check_config_text",
    "ignored_summary",
    "parse_cpu_constraint",
    "parse_cpu_quantity",
    "parse_memory_quantity",
    "report_findings",
    "unknown_summary",
    "validate_config",
    "validate_config_sections",
    "validate_config_text",
]

log = logging.getLogger("resmgr.config")

MAX_CONFIG_BYTES = 1024 * 1024
# Checked while parsing, before any object is built: a 549-byte alias bomb expands to billions
# of nodes when the cache writer serialises it, and a 100k-deep list overflows the recursive composer.
MAX_YAML_DEPTH, MAX_YAML_NODES = MAX_DEPTH, MAX_NODES
DOCUMENT = "<document>"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, nesting deeper than MAX_YAML_DEPTH, and documents
    whose aliases expand to more than MAX_YAML_NODES nodes (checked on the node graph, before
    any object is built)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        if node is not None and _expanded_size(node) > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(None, None, f"YAML aliases expand to more than {MAX_YAML_NODES} "
                                              "nodes", node.start_mark)
        return node


def _expanded_size(root: yaml.Node) -> int:
    """Nodes the document has once every alias is written out (each node counted once per use)."""
    sizes: dict[int, int] = {}
    # Iterative post-order walk: depth is bounded already, but a plain loop costs no stack at all.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if done or not children:
            sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in children), MAX_YAML_NODES + 1)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"unhashable key {key!r}", key_node.start_mark) from None
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_yaml(text: str, field: str, source: str) -> Any:
    try:
        docs = list(yaml.load_all(text, Loader=_StrictLoader))  # noqa: S506 - strict SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(field, f"invalid YAML{where}: {problem}", source=source) from None
    docs = [d for d in docs if d is not None]
    if len(docs) > 1:
        raise ConfigError(field, "expected one YAML document, found several", source=source)
    return docs[0] if docs else None


def _check_size(size: int, source: str) -> None:
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(DOCUMENT, f"config is {size} bytes, over the limit of {MAX_CONFIG_BYTES} bytes",
                          source=source)


@dataclass(frozen=True)
class CheckedConfig:
    """A valid config, typed, and what was left out of it, for the caller to report."""

    config: dict[str, Any]  # normalised: what is persisted and echoed
    ignored: list[str]  # paths of the fields accepted but not applied by this cri-resmgr
    unknown: list[str]  # the fields nobody knows, each "path (did you mean 'X'?)": a warning
    sections: ConfigSections  # the same config, typed: what the relay and the policies take

    @property
    def warning(self) -> str:
        """'' or the one-line warning about the unknown fields."""
        return unknown_summary(self.unknown)

    @property
    def info(self) -> str:
        """'' or the one line naming the fields accepted but not applied."""
        return ignored_summary(self.ignored)


def check_config(data: Any, *, source: str = "") -> CheckedConfig:
    """Validate an already parsed config: the normalised config, the ignored and the unknown fields."""
    try:
        config, findings = check(data)
    except ConfigError as exc:
        raise exc.with_source(source) from None
    return CheckedConfig(config, findings.ignored, findings.unknown, ConfigSections.of(config))


def check_config_text(text: str, *, source: str = "") -> CheckedConfig:
    """Parse and validate a cri-resource-manager YAML config (a whole file)."""
    if not isinstance(text, str):
        raise ConfigError(DOCUMENT, f"expected text, got {type(text).__name__}", source=source)
    _check_size(len(text.encode("utf-8", "surrogatepass")), source)
    return check_config(_load_yaml(text, DOCUMENT, source), source=source)


def check_config_sections(data: dict[str, str], *, source: str = "") -> CheckedConfig:
    """Validate the ConfigMap form: ``{section name: section YAML}``."""
    if not isinstance(data, dict):
        raise ConfigError(DOCUMENT, f"expected a mapping of section name to YAML, got {type(data).__name__}",
                          source=source)
    total = 0
    assembled: dict[str, Any] = {}
    # In key order: a protobuf map (the Config API) has none, and every component must report alike.
    for key, value in sorted(data.items(), key=lambda item: str(item[0])):
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigError(str(key), "ConfigMap data keys and values must be strings", source=source)
        total += len(key.encode()) + len(value.encode("utf-8", "surrogatepass"))
        _check_size(total, source)
        assembled[key] = _load_yaml(value, key, source)
    return check_config(assembled, source=source)


def report_findings(checked: CheckedConfig, source: str) -> CheckedConfig:
    """Log what was left out of ``checked`` (unknown fields, ignored fields) as warnings; returns it."""
    if checked.unknown:
        log.warning("config from %s: %s", source or "?", checked.warning,
                    extra={"config_source": source, "unknown_fields": checked.unknown})
    if checked.ignored:
        log.warning("config from %s: %s", source or "?", checked.info,
                    extra={"config_source": source, "ignored_fields": checked.ignored})
    return checked


def _logged(checked: CheckedConfig, source: str) -> dict[str, Any]:
    return report_findings(checked, source).config


def validate_config(data: Any, *, source: str = "") -> dict[str, Any]:
    """Validate an already parsed config mapping; returns the normalised mapping."""
    return _logged(check_config(data, source=source), source)


def validate_config_text(text: str, *, source: str = "") -> dict[str, Any]:
    """Parse and validate a cri-resource-manager YAML config (a whole file)."""
    return _logged(check_config_text(text, source=source), source)


def validate_config_sections(data: dict[str, str], *, source: str = "") -> dict[str, Any]:
    """Validate the ConfigMap form: ``{section name: section YAML}`` -> normalised config."""
    return _logged(check_config_sections(data, source=source), source)
