"""UpdateOrder: per container, the newest decision's update is the one that lands last."""

from __future__ import annotations

import threading

from resmgr.relay.hooks import ContainerUpdate
from resmgr.relay.update_order import UpdateOrder


def test_stale_updates_are_dropped_and_unnumbered_ones_always_go() -> None:
    order, sent = UpdateOrder(), []
    assert order.deliver(ContainerUpdate("a", "1", seq=4), sent.append)
    assert not order.deliver(ContainerUpdate("a", "2", seq=3), sent.append)
    assert order.deliver(ContainerUpdate("a", "3", seq=4), sent.append)  # same decision: sent
    assert order.deliver(ContainerUpdate("a", "4"), sent.append)  # unnumbered: as newest
    assert [u.cpuset_cpus for u in sent] == ["1", "3", "4"]


def test_a_failed_send_does_not_count_as_applied() -> None:
    order, sent = UpdateOrder(), []

    def broken(update: ContainerUpdate) -> None:
        raise OSError("runtime gone")
    try:
        order.deliver(ContainerUpdate("a", "1", seq=9), broken)
    except OSError:
        pass
    assert order.deliver(ContainerUpdate("a", "2", seq=8), sent.append)
    assert [u.cpuset_cpus for u in sent] == ["2"]


def test_a_forwarded_stale_cpuset_is_followed_by_the_newest_update() -> None:
    """Kubelet's update carries the cpuset of decision 5; decision 6's update landed while it was on its way."""
    order, sent = UpdateOrder(), []
    order.deliver(ContainerUpdate("a", "0-1", seq=6), sent.append)
    assert order.forward(ContainerUpdate("a", "0-3", seq=5), lambda: "answer", sent.append) == "answer"
    assert [u.cpuset_cpus for u in sent] == ["0-1", "0-1"]
    order.forward(ContainerUpdate("a", "2", seq=7), lambda: None, sent.append)
    assert not order.deliver(ContainerUpdate("a", "0-1", seq=6), sent.append)


def test_sends_to_one_container_never_overlap_and_others_go_in_parallel() -> None:
    order = UpdateOrder()
    inside, other_done, release = threading.Event(), threading.Event(), threading.Event()
    log: list[str] = []

    def slow(update: ContainerUpdate) -> None:
        log.append(f"start {update.cpuset_cpus}")
        inside.set()
        assert release.wait(60)
        log.append(f"end {update.cpuset_cpus}")

    t = threading.Thread(target=order.deliver, args=(ContainerUpdate("a", "1", seq=1), slow))
    t.start()
    assert inside.wait(60)
    # Another container is not held up by container a's slow send.
    order.deliver(ContainerUpdate("b", "9", seq=2), lambda u: other_done.set())
    assert other_done.is_set()
    late = threading.Thread(target=order.deliver, args=(ContainerUpdate("a", "2", seq=3), log.append))
    late.start()
    release.set()
    t.join()
    late.join()
    assert log[:2] == ["start 1", "end 1"] and log[2].cpuset_cpus == "2"


def test_the_tracked_containers_are_bounded() -> None:
    order = UpdateOrder(max_tracked=4)
    for i in range(10):
        order.deliver(ContainerUpdate(f"c{i}", "1", seq=i + 1), lambda u: None)
    assert order.tracked() == 4


def test_no_update_goes_out_while_a_container_starts() -> None:
    """containerd loses an update that races a StartContainer; the update waits for the start instead."""
    order = UpdateOrder()
    starting, release = threading.Event(), threading.Event()
    log: list[str] = []

    def start() -> str:
        starting.set()
        assert release.wait(60)
        log.append("started")
        return "ok"

    t = threading.Thread(target=order.exclusive, args=("a", start))
    t.start()
    assert starting.wait(60)
    update = threading.Thread(target=order.deliver, args=(ContainerUpdate("a", "1", seq=1),
                                                          lambda u: log.append("update")))
    update.start()
    release.set()
    t.join()
    update.join()
    assert log == ["started", "update"]
