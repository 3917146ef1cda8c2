"""The one error type every config problem is reported with."""

from __future__ import annotations

# How cri-resmgr answers the agent while --force-config is in effect; the agent recognises it and
# reports "force config in effect; dynamic configs not applied" as information (upstream: force wins).
AGENT_DISABLED = "configuration from the agent is disabled on this node"


class ConfigError(ValueError):
    """A configuration was rejected; ``field`` is the dotted path of the culprit.

    ``field`` looks like ``policy.balloons.BalloonTypes[0].MinCPUs``; problems with
    the document as a whole (size, YAML syntax) use ``<document>``.
    """

    def __init__(self, field: str, problem: str, *, source: str = "") -> None:
        self.field = field
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}invalid config field {field}: {problem}")

    def with_source(self, source: str) -> ConfigError:
        """The same error, attributed to ``source`` (a file or ConfigMap key)."""
        return ConfigError(self.field, self.problem, source=source)
