"""Error kinds the actuator and the reconciler raise; the reconciler maps them onto Gardener status."""

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


class RetryLater(RuntimeError):
    """The operation did not finish (an error was recorded, or it waits); run it again after ``delay`` seconds.

    The reconciler raises it; the kopf wiring turns it into kopf's TemporaryError.
    """

    def __init__(self, message: str, delay: float) -> None:
        self.delay = delay
        super().__init__(message)


class WaitingError(RetryLater):
    """The operation is progressing but not done; check again after ``delay`` seconds."""
