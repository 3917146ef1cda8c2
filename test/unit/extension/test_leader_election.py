"""Leader election without an API server: the library's algorithm over an in-memory Lease with
resourceVersion semantics; what a standby, a leader stopped cleanly and a leader that loses do."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from extension import leader_election as le
from extension.leader_election import ElectionSettings, LeaderElector, Outcome


class Store:
    """One Lease on a fake API server: a record and a version that every write bumps."""

    def __init__(self) -> None:
        self.record = None
        self.version = 0
        self.down = False  # every call fails, as with an unreachable API server


class NotFound(Exception):
    body = json.dumps({"code": 404})
    reason = "NotFound"


class Unavailable(Exception):
    body = "<html>bad gateway</html>"
    reason = "BadGateway"


class FakeLock:
    """LeaseLock's contract (get/create/update; replace fails when the Lease changed since the last get)."""

    def __init__(self, store: Store, identity: str) -> None:
        self.store, self.identity = store, identity
        self.name, self.namespace = "lease", "garden"
        self.seen_version = None

    def get(self, name, namespace):
        if self.store.down:
            return False, Unavailable()
        if self.store.record is None:
            return False, NotFound()
        self.seen_version = self.store.version
        return True, copy.copy(self.store.record)

    def create(self, name, namespace, election_record):
        if self.store.down or self.store.record is not None:
            return False
        self.store.record, self.store.version = copy.copy(election_record), self.store.version + 1
        self.seen_version = self.store.version
        return True

    def update(self, name, namespace, updated_record):
        if self.store.down or self.seen_version != self.store.version:
            return False
        self.store.record, self.store.version = copy.copy(updated_record), self.store.version + 1
        self.seen_version = self.store.version
        return True


def elector(store: Store, identity: str, *, lease: int = 3, renew: int = 2, retry: int = 1) -> LeaderElector:
    settings = ElectionSettings(namespace="garden", name="lease", identity=identity, lease_duration=lease,
                                renew_deadline=renew, retry_period=retry)
    return LeaderElector(FakeLock(store, identity), settings)


def take(store: Store, identity: str) -> None:
    """Another candidate writes the Lease (a fresh record, so it is not expired for anyone)."""
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

    store.record = LeaderElectionRecord(identity, "3", "2026-01-01 00:00:00", "2026-01-01 00:00:00")
    store.version += 1


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


@pytest.mark.parametrize("lease, renew, retry, problem", [
    (15, 10, 2, None),
    (4, 3, 1, None),
    (10, 10, 2, "must be longer than the renew deadline"),
    (9, 10, 2, "must be longer than the renew deadline"),
    (15, 2, 2, "1.2 x the retry period"),
    (15, 12, 10, "1.2 x the retry period"),
    (15, 10, 0, "at least 1 second"),
])
def test_durations_are_checked_as_client_go_does(lease, renew, retry, problem) -> None:
    got = le.check_durations(lease, renew, retry)
    assert (got is None) if problem is None else (problem in got), got


def test_identity_is_the_pod_name_and_unique_per_process() -> None:
    a, b = le.identity("ext-0"), le.identity("ext-0")
    assert a.startswith("ext-0_") and b.startswith("ext-0_") and a != b


def test_in_cluster_namespace_is_read_from_the_service_account(tmp_path) -> None:
    (tmp_path / "namespace").write_text("extension-cri-resmgr\n")
    assert le.in_cluster_namespace(tmp_path / "namespace") == "extension-cri-resmgr"
    assert le.in_cluster_namespace(tmp_path / "absent") is None


def test_the_lock_uses_the_given_api_client() -> None:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = "https://seed.example:6443"
    api_client = client.ApiClient(cfg)
    lock = le.lease_lock(api_client, ElectionSettings(namespace="garden", identity="me"))
    assert lock.api_instance.api_client is api_client
    assert (lock.name, lock.namespace, lock.identity) == (le.DEFAULT_LEASE_NAME, "garden", "me")


def test_a_leader_works_and_releases_the_lease_when_the_work_ends() -> None:
    store = Store()
    ran = []

    async def work(stop: asyncio.Event) -> None:
        ran.append(store.record.holder_identity)

    assert run(elector(store, "a").lead(asyncio.Event(), work)) is Outcome.RELEASED
    assert ran == ["a"]  # the work ran while "a" held the Lease
    assert store.record.holder_identity is None  # released: a standby takes it at its next retry
    # ... and it does, without waiting for the lease duration.
    assert run(elector(store, "b").lead(asyncio.Event(), work)) is Outcome.RELEASED
    assert ran == ["a", "b"]


def test_a_standby_stopped_while_waiting_never_works_and_leaves_the_lease_alone() -> None:
    store = Store()
    take(store, "leader")

    async def main() -> Outcome:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, stop.set)
        return await elector(store, "standby").lead(stop, work)

    async def work(stop: asyncio.Event) -> None:
        raise AssertionError("a standby must not work")

    assert run(main()) is Outcome.STOPPED_WAITING
    assert store.record.holder_identity == "leader"


def test_a_leader_whose_lease_was_taken_stops_working_and_does_not_release() -> None:
    store = Store()
    stopped = []

    async def work(stop: asyncio.Event) -> None:
        take(store, "usurper")  # e.g. this process stalled past the lease duration
        await stop.wait()
        stopped.append(True)

    assert run(elector(store, "a").lead(asyncio.Event(), work)) is Outcome.LOST
    assert stopped == [True]
    assert store.record.holder_identity == "usurper"


def test_a_leader_that_cannot_renew_within_the_deadline_loses() -> None:
    store = Store()

    async def work(stop: asyncio.Event) -> None:
        store.down = True
        await stop.wait()

    assert run(elector(store, "a").lead(asyncio.Event(), work)) is Outcome.LOST


def test_a_failing_leader_releases_the_lease_and_raises() -> None:
    store = Store()

    async def work(stop: asyncio.Event) -> None:
        raise RuntimeError("kopf failed")

    with pytest.raises(RuntimeError, match="kopf failed"):
        run(elector(store, "a").lead(asyncio.Event(), work))
    assert store.record.holder_identity is None


def test_the_leader_keeps_renewing_while_it_works() -> None:
    store = Store()
    versions = []

    async def work(stop: asyncio.Event) -> None:
        for _ in range(3):
            versions.append(store.version)
            while store.version == versions[-1]:
                await asyncio.sleep(0.05)
        assert store.record.holder_identity == "a"

    assert run(elector(store, "a").lead(asyncio.Event(), work)) is Outcome.RELEASED
