"""Leader election on a coordination.k8s.io/v1 Lease in the operator's own namespace.

Replicas compete for one Lease, as Gardener's Go extensions do with controller-runtime: the holder renews
it every retry period and works; a standby retries every retry period and takes it over once it has seen
no renewal for a lease duration. A holder that cannot renew within the renew deadline has lost the Lease
and must stop working at once. On a clean stop the holder clears holderIdentity (controller-runtime's
ReleaseOnCancel), so a standby acquires it at its next retry instead of after the lease duration.

The election algorithm (reading the record, expiry measured from when a change was observed, create and
replace with the resourceVersion so two candidates cannot both win) is the Kubernetes client's
``kubernetes.leaderelection``. Its ``LeaderElection.run`` is not used: it blocks a thread in loops that
cannot be stopped (a standby could not exit on SIGTERM) and never releases the Lease. The loops and the
release are written here, around its ``try_acquire_or_renew``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("extension.leader_election")

DEFAULT_LEASE_NAME = "gardener-extension-cri-resmgr-leader-election"
# controller-runtime's defaults (pkg/manager: LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s).
DEFAULT_LEASE_DURATION = 15
DEFAULT_RENEW_DEADLINE = 10
DEFAULT_RETRY_PERIOD = 2
# client-go's JitterFactor: the renew deadline must leave room for more than one retry.
JITTER_FACTOR = 1.2
# After losing the Lease, how long kopf gets to stop before the process exits anyway.
LOST_GRACE_SECONDS = 5.0
# Failed attempts without any record read before a standby warns that it cannot use the Lease.
UNREADABLE_ATTEMPTS = 5
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class ElectionSettings:
    namespace: str
    name: str = DEFAULT_LEASE_NAME
    identity: str = ""
    lease_duration: int = DEFAULT_LEASE_DURATION
    renew_deadline: int = DEFAULT_RENEW_DEADLINE
    retry_period: int = DEFAULT_RETRY_PERIOD

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"


class Outcome(enum.Enum):
    STOPPED_WAITING = "stopped while waiting for the lease"
    RELEASED = "stopped and released the lease"
    LOST = "lost the lease"


def check_durations(lease_duration: float, renew_deadline: float, retry_period: float) -> str | None:
    """Why these durations cannot work (as client-go checks them), or None."""
    if min(lease_duration, renew_deadline, retry_period) < 1:
        return "leader election durations must be at least 1 second"
    if lease_duration <= renew_deadline:
        return (f"the lease duration ({lease_duration:g} s) must be longer than the renew deadline "
                f"({renew_deadline:g} s): a standby must not take over while the holder may still renew")
    if renew_deadline <= JITTER_FACTOR * retry_period:
        return (f"the renew deadline ({renew_deadline:g} s) must be longer than {JITTER_FACTOR:g} x the retry "
                f"period ({retry_period:g} s): the holder needs more than one renewal attempt per deadline")
    return None


def in_cluster_namespace(path: Path = IN_CLUSTER_NAMESPACE_FILE) -> str | None:
    """The pod's namespace from its service account, as controller-runtime defaults it; None outside a cluster."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def identity(pod_name: str | None = None) -> str:
    """The pod name (or host name) plus a per-process UUID: a restarted container is a new candidate."""
    return f"{pod_name or os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


class _BoundedLeaseApi(client.CoordinationV1Api):
    """Lease calls that give up after ``timeout`` seconds: a hung connection must not keep the election's
    one thread busy past the renew deadline (client-go bounds each attempt with a context the same way)."""

    def __init__(self, api_client: client.ApiClient, timeout: float) -> None:
        super().__init__(api_client)
        self._timeout = timeout

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self._timeout)
        return super().read_namespaced_lease(name, namespace, **kwargs)

    def create_namespaced_lease(self, namespace: str, body: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self._timeout)
        return super().create_namespaced_lease(namespace, body, **kwargs)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self._timeout)
        return super().replace_namespaced_lease(name, namespace, body, **kwargs)


def lease_lock(api_client: client.ApiClient, settings: ElectionSettings) -> LeaseLock:
    lock = LeaseLock(settings.name, settings.namespace, settings.identity)
    # LeaseLock builds its API from the global default configuration; ours carries the credentials.
    lock.api_instance = _BoundedLeaseApi(api_client, timeout=settings.renew_deadline)
    return lock


class LeaderElector:
    """Acquire, hold and release the Lease for one process; ``lead`` runs the work while this is the leader."""

    def __init__(self, lock: LeaseLock, settings: ElectionSettings) -> None:
        self.settings = settings
        self._lock = lock
        self._election = leaderelection.LeaderElection(electionconfig.Config(
            lock=lock, lease_duration=settings.lease_duration, renew_deadline=settings.renew_deadline,
            retry_period=settings.retry_period,
            # Callbacks of LeaderElection.run, which is not used (see the module docstring).
            onstarted_leading=lambda: None, onstopped_leading=lambda: None))
        # One thread: LeaderElection keeps the observed record, so its calls must not overlap.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leader-election")
        self._renewed = 0.0  # monotonic start of the last successful acquire or renew
        if not log.isEnabledFor(logging.DEBUG):
            # The library logs every retry at info level ("lease held by ... has not expired").
            logging.getLogger("leaderelection").setLevel(logging.WARNING)

    async def lead(self, stop: asyncio.Event, work: Callable[[asyncio.Event], Awaitable[None]]) -> Outcome:
        """Wait for the Lease (until ``stop``), then run ``work(stop)`` while holding it.

        ``work`` ends when ``stop`` is set. On a lost Lease this sets ``stop``, gives ``work`` a short
        grace and returns LOST: the caller must exit. When ``work`` ends while the Lease is held, the Lease
        is released (also when ``work`` raised; its error propagates after the release).
        """
        s = self.settings
        if not await self._acquire(stop):
            self._executor.shutdown(wait=False)
            log.info(f"stopped while waiting for the lease {s.lease}",
                     extra={"lease": s.lease, "identity": s.identity})
            return Outcome.STOPPED_WAITING
        log.info(f"acquired the lease {s.lease}", extra={"lease": s.lease, "identity": s.identity})
        # kopf cancels the tasks that appear while it runs: the renew loop below creates none (see _call).
        work_task = asyncio.create_task(work(stop), name="leader work")
        why = await self._renew_until(work_task)
        if why is not None:
            log.warning(f"lost the lease {s.lease}: {why}; stopping", extra={"lease": s.lease, "identity": s.identity})
            stop.set()
            await asyncio.wait({work_task}, timeout=LOST_GRACE_SECONDS)
            if work_task.done() and not work_task.cancelled():
                work_task.exception()  # retrieved: the loss is what is reported
            return Outcome.LOST
        try:
            work_task.result()
        finally:
            released = await self._release()
            log.info(f"released the lease {s.lease}" if released else
                     f"stopped; the lease {s.lease} was not ours to release",
                     extra={"lease": s.lease, "identity": s.identity})
        return Outcome.RELEASED

    async def _call(self, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        """Run a blocking Lease call on the election's thread. A plain future, not a task: kopf would cancel
        a task created while it runs. None when it did not finish in ``timeout`` (it still ends, bounded
        by the request timeout, and its result is dropped)."""
        fut: Future = self._executor.submit(fn)
        done = await asyncio.wait({asyncio.wrap_future(fut)}, timeout=timeout)
        if not done[0]:
            fut.add_done_callback(lambda f: f.exception())
            return None
        return fut.result()

    async def _try(self, timeout: float | None = None) -> bool:
        started = time.monotonic()
        try:
            ok = bool(await self._call(self._election.try_acquire_or_renew, timeout))
        except Exception as err:  # an API error is a failed attempt, retried next period
            log.debug("lease attempt failed", extra={"lease": self.settings.lease, "error": str(err)})
            ok = False
        if ok:
            self._renewed = started
        return ok

    async def _acquire(self, stop: asyncio.Event) -> bool:
        s = self.settings
        told: str | None = None
        unread = 0
        while not stop.is_set():
            if await self._try():
                return True
            holder = self.holder()
            if holder is not None and holder != told:  # once per holder, not every retry
                log.info(f"waiting for the lease {s.lease}, held by {holder}",
                         extra={"lease": s.lease, "identity": s.identity, "holder": holder})
                told = holder
            # The library logs why at debug level only; a candidate that can never read nor take the
            # Lease (RBAC, wrong namespace) must say so.
            unread = unread + 1 if holder is None else 0
            if unread == UNREADABLE_ATTEMPTS:
                log.warning(f"cannot read or take the lease {s.lease} (RBAC: get, create and update on leases "
                            "in that namespace?); retrying", extra={"lease": s.lease, "identity": s.identity})
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.settings.retry_period)
            except TimeoutError:
                pass
        return False

    async def _renew_until(self, work_task: asyncio.Task) -> str | None:
        """Renew every retry period while ``work_task`` runs; None when it ended, else why the Lease is lost."""
        s = self.settings
        while True:
            done, _ = await asyncio.wait({work_task}, timeout=s.retry_period)
            if done:
                return None
            remaining = self._renewed + s.renew_deadline - time.monotonic()
            if remaining > 0 and await self._try(timeout=remaining):
                continue
            holder = self.holder()
            if holder is not None and holder != s.identity:
                return f"now held by {holder}"
            if time.monotonic() - self._renewed >= s.renew_deadline:
                return f"not renewed within the renew deadline ({s.renew_deadline} s)"

    def holder(self) -> str | None:
        """The holder in the record last read, None when unknown or released."""
        record = self._election.observed_record
        return record.holder_identity if record is not None else None

    async def _release(self) -> bool:
        """Clear holderIdentity if the Lease is still ours (the replace carries the resourceVersion)."""
        def release() -> bool:
            found, record = self._lock.get(self.settings.name, self.settings.namespace)
            if not found or record.holder_identity != self.settings.identity:
                return False
            now = str(dt.datetime.fromtimestamp(time.time()))  # the record format LeaseLock converts
            return bool(self._lock.update(self.settings.name, self.settings.namespace,
                                          LeaderElectionRecord(None, "1", now, now)))

        try:
            return bool(await self._call(release, timeout=self.settings.renew_deadline))
        except Exception as err:
            log.warning(f"could not release the lease {self.settings.lease}: {err}",
                        extra={"lease": self.settings.lease})
            return False
        finally:
            self._executor.shutdown(wait=False)
