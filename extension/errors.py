"""Error kinds the actuator raises; the handlers map them onto Gardener status."""

from __future__ import annotations


class ConfigurationError(ValueError):
    """User input (providerConfig, base configs, image vector) is invalid.

    Retrying does not help until the input changes, so it is reported in
    lastError and nothing is deployed. ``field`` is a dotted path to the culprit.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


class WaitingError(RuntimeError):
    """The operation is progressing but not done; check again after ``delay`` seconds."""

    def __init__(self, message: str, delay: float) -> None:
        self.delay = delay
        super().__init__(message)
