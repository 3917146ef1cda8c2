"""CRI decisions: ``before`` a call reserves, ``after`` confirms, ``failed`` gives back (resmgr.relay.hooks)."""

from __future__ import annotations

import dataclasses
import logging

from google.protobuf.message import Message

from resmgr.manager.placement_diff import PENDING_PREFIX, diff_groups, diff_placements, fmt_cpus
from resmgr.manager.state import (
    ManagerState,
    PendingCreate,
    PendingResize,
)
from resmgr.model.resources import (
    ContainerInfo,
    container_from_create_request,
    estimate_linux_resources,
    pod_from_sandbox_config,
)
from resmgr.model.state import Lifecycle
from resmgr.relay.hooks import ContainerUpdate, HookResult
from resmgr.topology.cpuset import format_cpuset

log = logging.getLogger("resmgr.resource-manager")


class CriDecisions(ManagerState):
    """The hook's ``before``/``after``/``failed``: placements for CreateContainer and resizes, releases on stop and
    remove."""

    # Calls run concurrently: only decisions and their bookkeeping hold ``_lock``, never the runtime
    # call. A decision reserves (a pending allocation, a resize with its undo record) and hands the
    # record back as the HookResult's ``call``; ``after`` confirms it, ``failed`` gives it back.
    def before(self, method: str, request: Message) -> HookResult:
        with self._lock:
            self._notice_bypass(method, request)
            if method == "CreateContainer":
                result = self._before_create(request)
            elif method == "UpdateContainerResources":
                call, updates = self._resize(request)
                new_request, placed = self._enforce_update(request)
                result = HookResult(request=new_request, updates=updates, call=call, placed=placed)
            else:
                return HookResult()
            self._decided(result.updates, result.placed)
            return result

    def after(self, method: str, request: Message, response: Message, call: object = None) -> list[ContainerUpdate]:
        with self._lock:
            return self._decided(self._after(method, request, response, call))

    def failed(self, method: str, request: Message, call: object = None) -> list[ContainerUpdate]:
        """The runtime failed the call: give back what ``before`` reserved for it."""
        with self._lock:
            if method == "CreateContainer":
                record = self._create_record(call)
                return self._decided(self._drop_failed_create(record) if record is not None else [])
            if method == "UpdateContainerResources":
                resize = self._resize_record(call, request)
                return self._decided(self._undo_refused_resize(resize) if resize is not None else [])
            return []

    def _after(self, method: str, request: Message, response: Message, call: object) -> list[ContainerUpdate]:
        if method == "RunPodSandbox":
            pod = pod_from_sandbox_config(response.pod_sandbox_id, request.config)
            self.pods[pod.id] = pod
            self.save()
            return []
        if method == "CreateContainer":
            return self._after_create(request, response, self._create_record(call))
        if method == "StartContainer":
            if self.state.lifecycle(request.container_id) is Lifecycle.CREATED:
                self.state.set_lifecycle(request.container_id, Lifecycle.RUNNING)
            self._apply_container_classes(request.container_id)
            return []
        if method == "UpdateContainerResources":
            if self._resize_record(call, request) is not None:
                self.save()  # the runtime applied the resize: now it is the state to restore
            return []
        if method == "StopContainer":
            return self._release([request.container_id], forget=False, reason="container stopped")
        if method == "RemoveContainer":
            return self._release([request.container_id], forget=True, reason="container removed")
        if method in ("StopPodSandbox", "RemovePodSandbox"):
            pod_id = request.pod_sandbox_id
            cids = [cid for cid, c in self.containers.items() if c.pod_id == pod_id]
            forget = method == "RemovePodSandbox"
            updates = self._release(cids, forget=forget, reason=f"pod {method[:-7].lower()}ped")
            if forget and self.pods.pop(pod_id, None) is not None:
                self.save()
            return updates
        return []

    def _create_record(self, call: object) -> PendingCreate | None:
        """The reservation ``call`` stands for, taken out of the pending ones (callers without handles: the oldest)."""
        if isinstance(call, PendingCreate):
            return self._creates.pop(call.key, None)
        if call is None and self._creates:
            return self._creates.pop(next(iter(self._creates)))
        return None

    def _resize_record(self, call: object, request: Message) -> PendingResize | None:
        if isinstance(call, PendingResize):
            return self._resizes.pop(id(call), None)
        if call is None:  # a caller without handles: the newest resize of that container
            for key, r in reversed(self._resizes.items()):
                if r.cid == request.container_id:
                    return self._resizes.pop(key)
        return None

    def _before_create(self, request: Message) -> HookResult:
        pod = self.pods.get(request.pod_sandbox_id)
        container = container_from_create_request(request, pod)
        key = f"{PENDING_PREFIX}{next(self._seq)}"
        old = self.policy.group_state()
        older = self._older_instances(container)
        for cid in older:
            # kubelet restarts a container by creating it again in its pod; the old instance has exited
            # (its exit may not have been seen yet), and it must not keep what the new one needs.
            log.info("re-creation of container %s/%s/%s: releasing the older instance %s", container.namespace,
                     container.pod_name, container.name, cid)
            self.policy.release(cid)
            self.state.end(cid, Lifecycle.EXITED)
        self.state.register(key, container, Lifecycle.PENDING)
        try:
            self.policy.allocate(key, container)
        except BaseException:
            if key not in self.policy.containers:  # nothing reserved: the relay passes the request unchanged
                self.state.forget(key)
            raise
        self._mutations += 1
        cpus, mems = self.policy.placement(key)
        record = self._creates[key] = PendingCreate(key, (fmt_cpus(cpus), fmt_cpus(mems)))
        reason = f"{container.namespace}/{container.pod_name}/{container.name} created"
        updates = diff_groups(self.policy, old, skip=key, reason=reason)
        if updates or older:  # the reservation moved running containers: the cache must know where they are
            self.save()
        edits = self.policy.create_edits(key)
        if cpus is None and mems is None and edits is None:
            return HookResult(updates=updates, call=record)
        new_request = type(request)()
        new_request.CopyFrom(request)
        if edits is not None:
            edits.apply(new_request.config)
        resources = new_request.config.linux.resources
        if cpus is not None:
            resources.cpuset_cpus = format_cpuset(cpus)
        if mems is not None:
            resources.cpuset_mems = format_cpuset(mems)
        return HookResult(request=new_request, updates=updates, call=record)

    def _older_instances(self, container: ContainerInfo) -> list[str]:
        """Created containers of the same pod and name that still hold resources (earlier restarts' instances)."""
        pod_id, name = container.pod_id, container.name
        if not name:
            return []
        # Every create scans every placed container: locals, and the pod first (it rules out most at once), keep
        # this at ~7 us for 200 containers. Pending reservations are not instances the runtime created.
        return [cid for cid, c in self.policy.containers.items()
                if c.pod_id == pod_id and c.name == name and not cid.startswith(PENDING_PREFIX)]

    def _after_create(self, request: Message, response: Message, record: PendingCreate | None
                      ) -> list[ContainerUpdate]:
        cid = response.container_id
        self._mutations += 1
        if record is None or record.key not in self.policy.containers:
            # Not decided by us (e.g. the hook failed before); adopt it now.
            if record is not None:
                self.state.forget(record.key)
            pod = self.pods.get(request.pod_sandbox_id)
            container = container_from_create_request(request, pod)
            container.id = cid
            old = self.policy.group_state()
            self.state.register(cid, container, Lifecycle.CREATED)
            self.policy.allocate(cid, container)
            self.save()
            return diff_groups(self.policy, old, skip=cid, reason="container adopted")
        if cid in self.policy.containers:  # a resync adopted it meanwhile; the reservation knows its real resources
            self.policy.release(cid)
        started = self.state.lifecycle(cid) is Lifecycle.RUNNING  # a resync may have listed it running already
        self.policy.rename(record.key, cid)
        container = self.policy.containers[cid]
        container.id = cid
        self.state.register(cid, container, Lifecycle.RUNNING if started else Lifecycle.CREATED)
        self.save()
        # Decisions made while the runtime created it moved its group, but a pending container
        # gets no updates: the cpuset it was created with may be stale now.
        cpus, mems = self.policy.placement(cid)
        now = (fmt_cpus(cpus), fmt_cpus(mems))
        if now != record.placement and (cpus is not None or mems is not None):
            return [ContainerUpdate(cid, now[0], now[1], reason="placement changed while it was created")]
        return []

    def _undo_refused_resize(self, undo: PendingResize) -> list[ContainerUpdate]:
        cid = undo.cid
        log.warning("UpdateContainerResources of %s did not succeed; undoing its resize", cid)
        if cid not in self.policy.containers:
            return []  # removed meanwhile: nothing left to undo
        before = self.policy.placements()
        self.state.set_info(cid, undo.container)
        if undo.mutation == self._mutations:
            # Nothing was decided since: restoring the exported state (not release + allocate) gives
            # back exactly the CPUs every container had, so the runtime, which kept them, agrees with
            # the policy again.
            live = dict(self.policy.containers)
            live[cid] = undo.container
            self.policy.restore_state(undo.state, live)
        else:
            # Other decisions came in between and must survive: place it again with its own resources.
            self._place(cid, undo.container, always=True)
        # The reservation was saved: the cache must not keep the refused size (found by the concurrent-calls
        # state machine: a restart restored a balloon member with the size kubelet's failed resize asked for).
        self.save()
        self._mutations += 1
        after = self.policy.placements()
        updates = diff_placements(before, after, reason=f"resize of {cid} refused")
        cpus, mems = after[cid]
        # The runtime kept what the container had before the resize; it must end up where the policy says.
        if (cpus, mems) != undo.placement and (cpus is not None or mems is not None) and \
                all(u.container_id != cid for u in updates):
            updates.append(ContainerUpdate(cid, fmt_cpus(cpus), fmt_cpus(mems), reason=f"resize of {cid} refused"))
        return updates

    def _drop_failed_create(self, record: PendingCreate) -> list[ContainerUpdate]:
        if record.key not in self.policy.containers:
            self.state.forget(record.key)
            return []
        log.warning("CreateContainer did not succeed; releasing its allocation")
        old = self.policy.group_state()
        self.policy.release(record.key)
        self.state.forget(record.key)
        self._mutations += 1
        # Releasing need not undo the decision exactly (a balloon shrinks by other CPUs than it
        # grew by), so the cache must learn the new state, or a restart restores the old one.
        self.save()
        return diff_groups(self.policy, old, reason="failed create released")

    def _resize(self, request: Message) -> tuple[PendingResize | None, list[ContainerUpdate]]:
        """Kubelet changed a container's CPU/memory (in-place resize): re-place it if it asks for more or less."""
        cid = request.container_id
        container = self.containers.get(cid)
        if container is None or cid not in self.policy.containers or not request.HasField("linux"):
            return None, []
        if not request.linux.cpu_shares:  # not kubelet's resource update (e.g. only a cpuset change)
            return None, []
        resources = estimate_linux_resources(request.linux)
        if resources == (container.request_milli, container.limit_milli, container.memory_limit):
            return None, []
        resized = dataclasses.replace(container, request_milli=resources[0], limit_milli=resources[1],
                                      memory_limit=resources[2])
        undo = PendingResize(cid, container, self.policy.export_state(), self.policy.placement(cid))
        old = self.policy.group_state()
        # Saved once the runtime applied it (after); only the groups it moved are diffed (hot path).
        self._place(cid, resized, always=True)
        self.state.set_info(cid, resized)
        self._mutations += 1
        undo.mutation = self._mutations
        self._resizes[id(undo)] = undo
        log.info("container %s resized to request=%dm limit=%dm memory=%d", cid, *resources)
        return undo, diff_groups(self.policy, old, skip=cid, reason=f"container {cid} resized")

    def _enforce_update(self, request: Message) -> tuple[Message | None, ContainerUpdate | None]:
        """Kubelet's update with the policy's cpuset, and that cpuset as an update (ordered with the others)."""
        cid = request.container_id
        if cid not in self.policy.containers:
            return None, None
        cpus, mems = self.policy.placement(cid)
        if cpus is None and mems is None:
            return None, None
        new_request = type(request)()
        new_request.CopyFrom(request)
        if cpus is not None:
            new_request.linux.cpuset_cpus = format_cpuset(cpus)
        if mems is not None:
            new_request.linux.cpuset_mems = format_cpuset(mems)
        return new_request, ContainerUpdate(cid, fmt_cpus(cpus), fmt_cpus(mems), reason="kubelet update")
