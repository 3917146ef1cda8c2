"""The grammar of ``dump.Config``: comma-separated ``LEVEL:REGEXP`` rules, parsed once by the schema.

A rule's regexp must match the whole method name (``CreateContainer``, ``PullImage``) and the last
matching rule wins; ``full`` dumps complete messages, ``short`` one-line summaries, ``off`` nothing.
The relay's dumper (``resmgr.relay.dump``) applies the parsed ``DumpConfig``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LEVELS = ("off", "short", "full")


class DumpConfigError(ValueError):
    """A ``dump:`` section that cannot be used; the message names the offending rule."""


@dataclass(frozen=True)
class DumpRule:
    level: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class DumpConfig:
    rules: tuple[DumpRule, ...] = ()
    file: str | None = None

    def level_for(self, method: str) -> str:
        level = "off"
        for rule in self.rules:
            if rule.pattern.fullmatch(method):
                level = rule.level
        return level


def parse_dump_rules(text: str) -> tuple[DumpRule, ...]:
    """Parse ``'off:.*,short:Create.*'``. Commas inside regexps are allowed within (), [] and {}."""
    rules: list[DumpRule] = []
    for item in _split_rules(text):
        level, sep, regexp = item.partition(":")
        level = level.strip().lower()
        if not sep or level not in LEVELS:
            raise DumpConfigError(f"rule {item!r} must be LEVEL:REGEXP with LEVEL one of "
                                  f"{', '.join(LEVELS)}")
        try:
            pattern = re.compile(regexp.strip())
        except re.error as err:
            raise DumpConfigError(f"rule {item!r} has an invalid regexp: {err}") from None
        rules.append(DumpRule(level, pattern))
    return tuple(rules)


def _split_rules(text: str) -> list[str]:
    items, depth, current = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]
