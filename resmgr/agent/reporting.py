"""Reporting what the agent did: node annotations, Events and Adjustment status."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from resmgr.agent import rollout
from resmgr.agent.kube import ADJUSTMENT_GROUP, ADJUSTMENT_PLURAL, ADJUSTMENT_VERSION
from resmgr.agent.selection import CONFIG_NAMESPACE, Selection
from resmgr.configplane.adjustments import SPEC_ERROR_KEY
from resmgr.options import RELAY_CONFIG_ERROR_ANNOTATION as RELAY_CONFIG_ERROR

log = logging.getLogger("resmgr.agent")

ANNOTATION_PREFIX = "cri-resource-manager.intel.com/"
CONFIG_SOURCE_ANNOTATION = ANNOTATION_PREFIX + "config-source"
CONFIG_ERROR_ANNOTATION = ANNOTATION_PREFIX + "config-error"
# Information about the active config, not an error: fields accepted but not applied, force config in effect.
CONFIG_INFO_ANNOTATION = ANNOTATION_PREFIX + "config-info"
# A warning about the active config, not an error: unknown fields (likely typos), left out of it.
CONFIG_WARNING_ANNOTATION = ANNOTATION_PREFIX + "config-warning"
# Written by cri-resmgr through the agent (PatchNode) while it runs without the config it was given.
RELAY_CONFIG_ERROR_ANNOTATION = RELAY_CONFIG_ERROR
COMPONENT = "cri-resmgr-agent"
# Events about a cluster-scoped object (our Node) must live in "default", as kubelet's do.
EVENT_NAMESPACE = "default"
MERGE_PATCH = "application/merge-patch+json"


def config_annotations(selection: Selection | None, error: str, info: str = "", *,
                       applied: bool = True, warning: str = "") -> dict[str, str | None]:
    """The node annotations for a config outcome; None removes an annotation.

    ``info`` is information about the outcome (ignored fields, force config in effect), ``warning`` a warning
    about the applied config (unknown fields left out); ``applied`` False means cri-resmgr kept another
    config without an error (its --force-config wins)."""
    if selection is None:
        return {CONFIG_SOURCE_ANNOTATION: "none", CONFIG_ERROR_ANNOTATION: None, CONFIG_INFO_ANNOTATION: None,
                CONFIG_WARNING_ANNOTATION: None}
    source = f"{CONFIG_NAMESPACE}/{selection.name}@{selection.resource_version}"
    if error:
        # The other annotations keep describing what is really active; the error names what was refused.
        return {CONFIG_ERROR_ANNOTATION: f"{source}: {error}"}
    info_value = f"{source}: {info}" if info else None
    if not applied:
        return {CONFIG_ERROR_ANNOTATION: None, CONFIG_INFO_ANNOTATION: info_value, CONFIG_WARNING_ANNOTATION: None}
    return {CONFIG_SOURCE_ANNOTATION: source, CONFIG_ERROR_ANNOTATION: None, CONFIG_INFO_ANNOTATION: info_value,
            CONFIG_WARNING_ANNOTATION: f"{source}: {warning}" if warning else None}


def event_subject(selection: Selection) -> str:
    """The ConfigMap as Events name it: which one, which version, and why it is this node's."""
    why = f"; {selection.reason}" if selection.reason else ""
    return f"{selection.source} (resourceVersion {selection.resource_version}{why})"


def adjustment_status_patch(node: str, result: Mapping[str, Any], current: Mapping[str, Any] | None
                            ) -> dict[str, Any]:
    """Merge patch for ``status.nodes[node].errors``: new errors set, stale ones removed."""
    errors: dict[str, str | None] = dict(result.get("container_errors") or {})
    if result.get("error"):
        errors[SPEC_ERROR_KEY] = result["error"]
    old = (((current or {}).get("status") or {}).get("nodes") or {}).get(node) or {}
    for key in old.get("errors") or {}:
        errors.setdefault(key, None)
    return {"status": {"nodes": {node: {"errors": errors}}}}


class KubeReporter:
    def __init__(self, api: client.ApiClient, node: str, namespace: str = CONFIG_NAMESPACE) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.node = node
        self.namespace = namespace
        self._node_uid = ""

    def _event(self, reason: str, message: str, warning: bool) -> None:
        now = datetime.now(UTC)
        if not self._node_uid:
            try:
                self._node_uid = self.core.read_node(self.node).metadata.uid or ""
            except ApiException:
                pass
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{self.node}.{uuid.uuid4().hex[:12]}", namespace=EVENT_NAMESPACE),
            involved_object=client.V1ObjectReference(kind="Node", name=self.node, uid=self._node_uid or None),
            reason=reason, message=message[:1024], type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=COMPONENT, host=self.node),
            first_timestamp=now, last_timestamp=now, count=1)
        try:
            self.core.create_namespaced_event(EVENT_NAMESPACE, body)
        except ApiException as exc:
            log.error("cannot create Event %s: HTTP %s %s: %s", reason, exc.status, exc.reason, exc.body)

    def config_outcome(self, selection: Selection | None, error: str, info: str = "", *,
                       applied: bool = True, warning: str = "") -> None:
        annotations = config_annotations(selection, error, info, applied=applied, warning=warning)
        try:
            self.core.patch_node(self.node, {"metadata": {"annotations": annotations}}, _content_type=MERGE_PATCH)
        except ApiException as exc:
            log.error("cannot annotate node %s: HTTP %s %s", self.node, exc.status, exc.reason)
        if selection is None:
            return
        what = event_subject(selection)
        if error:
            self._event("ConfigRejected", f"{what} was not applied; the previous config stays active: {error}", True)
        elif not applied:
            self._event("ForceConfigInEffect", f"{what}: {info}", False)
        else:
            self._event("ConfigApplied", f"{what} is active in cri-resmgr", False)
            if warning:
                self._event("ConfigFieldsUnknown", f"{what}: {warning}", True)
            if info:
                self._event("ConfigFieldsIgnored", f"{what}: {info}", False)

    def rollout_outcome(self, selection: Selection, report: rollout.Report) -> None:
        """A canary's report on a staged config rollout: the Node annotation the extension reads, and an Event."""
        patch = {"metadata": {"annotations": {rollout.ROLLOUT_ANNOTATION: report.to_annotation()}}}
        try:
            self.core.patch_node(self.node, patch, _content_type=MERGE_PATCH)
        except ApiException as exc:
            log.error("cannot annotate node %s: HTTP %s %s", self.node, exc.status, exc.reason)
        what = f"config rollout {report.attempt} ({event_subject(selection)})"
        if report.state == rollout.FAILED:
            self._event("ConfigRolloutFailed", f"{what} was refused on this canary node; it went back to the last "
                                               f"good config, and the rollout stops: {report.reason}", True)
        else:
            self._event("ConfigRolloutApplied", f"{what}: {report.state} on this canary node", False)

    def rollout_diff(self, selection: Selection, report: rollout.DiffReport, *, refused: bool) -> None:
        """A canary's dry run of a rollout attempt: the bounded summary on the Node (the extension shows it in the
        Extension's status) and in an Event; the agent's log has every container."""
        patch = {"metadata": {"annotations": {rollout.DIFF_ANNOTATION: report.to_annotation()}}}
        try:
            self.core.patch_node(self.node, patch, _content_type=MERGE_PATCH)
        except ApiException as exc:
            log.error("cannot annotate node %s: HTTP %s %s", self.node, exc.status, exc.reason)
        self._event("ConfigRolloutDryRun", f"config rollout {report.attempt} ({event_subject(selection)}), dry run "
                                           f"on this canary node: {report.summary}", refused)

    def adjustment_outcomes(self, results: Mapping[str, dict[str, Any]],
                            adjustments: Mapping[str, Mapping[str, Any]]) -> None:
        for key, result in results.items():
            namespace, _, name = key.partition("/")
            patch = adjustment_status_patch(self.node, result, adjustments.get(key))
            for attempt in range(3):
                try:
                    self.custom.patch_namespaced_custom_object_status(
                        ADJUSTMENT_GROUP, ADJUSTMENT_VERSION, namespace, ADJUSTMENT_PLURAL, name, patch,
                        _content_type=MERGE_PATCH)
                    break
                except ApiException as exc:
                    if exc.status == 404:
                        log.info("adjustment %s is gone; not writing its status", key)
                        break
                    if attempt == 2:
                        log.error("cannot write status of adjustment %s: HTTP %s %s", key, exc.status, exc.reason)
                    time.sleep(0.5 * (attempt + 1))
