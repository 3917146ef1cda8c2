"""A deployable part of the extension: one ManagedResource (plus its Secret) with Deploy, Wait and Destroy.

As in gardener-extension-registry-cache, the actuator composes components and each component
knows only its own objects:

* ``deploy()`` writes the ManagedResource from the component's values; returns the Secret's name;
* ``wait_healthy(secret)`` raises WaitingError until gardener-resource-manager reports it applied and healthy;
* ``destroy(keep_objects=...)`` deletes it (``keep_objects`` leaves the objects in the target cluster: migrate);
* ``wait_cleanup()`` raises WaitingError until it is gone.

Waiting never sleeps: WaitingError carries the delay after which the caller checks again.
"""

from __future__ import annotations

from typing import Any

from extension.errors import WaitingError
from extension.gardener import health, managed_resources
from extension.gardener.kube import Apis


class NotHealthy(WaitingError):
    """A deployed component is not healthy yet; ``detail`` is gardener-resource-manager's reason."""

    def __init__(self, message: str, detail: str, delay: float) -> None:
        self.detail = detail
        super().__init__(message, delay)


class ManagedResourceComponent:
    """The Deploy/Wait/Destroy life cycle shared by every component; subclasses say what ``spec()`` holds.

    A bare instance (only a name) can still be inspected, destroyed and waited for: deleting needs no values.
    """

    def __init__(self, apis: Apis, namespace: str, name: str, *, poll_interval: float) -> None:
        self.apis = apis
        self.namespace = namespace
        self.name = name
        self.poll_interval = poll_interval

    def spec(self) -> managed_resources.ManagedResourceSpec:
        raise NotImplementedError(f"{type(self).__name__} {self.name} has no values to deploy")

    def deploy(self) -> str:
        return managed_resources.deploy(self.apis, self.spec())

    def current(self) -> dict[str, Any] | None:
        return managed_resources.get(self.apis, self.namespace, self.name)

    def wait_healthy(self, secret: str, what: str = "rollout") -> None:
        mr = self.current()
        if not health.is_healthy(mr, secret_name=secret):
            _, _, detail = health.assess(mr, hibernated=False)
            raise NotHealthy(f"waiting for the {what} to become healthy: {detail}", detail, self.poll_interval)

    def destroy(self, *, keep_objects: bool = False) -> None:
        if keep_objects:
            managed_resources.set_keep_objects(self.apis, self.namespace, self.name, True)
        managed_resources.delete(self.apis, self.namespace, self.name)

    def wait_cleanup(self) -> None:
        if managed_resources.exists(self.apis, self.namespace, self.name):
            raise WaitingError(f"waiting for managed resource {self.name} to be deleted", self.poll_interval)
