"""Command line of cri-resmgr-agent: wire the watchers, the pusher and the Agent API together."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from kubernetes import client

from resmgr.agent.controller import AgentState, Pusher
from resmgr.agent.kube import (
    ADJUSTMENT_GROUP,
    ADJUSTMENT_PLURAL,
    ADJUSTMENT_VERSION,
    KubeConfigError,
    ListWatcher,
    load_api_client,
)
from resmgr.agent.metrics_forward import DEFAULT_RELAY_METRICS_SOCKET, serve_forwarded_metrics
from resmgr.agent.placement_events import PlacementEvents, TokenBucket, kube_poster
from resmgr.agent.reporting import KubeReporter
from resmgr.agent.selection import CONFIG_NAMESPACE
from resmgr.agent.server import AgentServicer, serve_agent
from resmgr.agent.target import ConfigSocketTarget
from resmgr.agent.unix_grpc import stop_unix
from resmgr.logsetup import setup_logging_from_args
from resmgr.options import DEFAULT_AGENT_SOCKET, DEFAULT_CONFIG_SOCKET, add_logging_arguments

log = logging.getLogger("resmgr.agent")


DESCRIPTION = """\
cri-resmgr-agent runs as a DaemonSet in the shoot. It watches, in the namespace
kube-system, the ConfigMaps cri-resmgr-config.node.$NODE_NAME,
cri-resmgr-config.pool.$POOL (POOL is the node's label worker.gardener.cloud/pool,
set by Gardener), cri-resmgr-config.group.$GROUP (GROUP is the node's label
cri-resource-manager.intel.com/group, set by hand) and cri-resmgr-config.default,
in that order of precedence (node > pool > group > default): the first that exists
is the node's config (ConfigMaps are not merged), and a label change moves the node
to another one. Each data key is a config section (policy, logger, dump, ...) whose
value is that section's YAML.

The config is validated with cri-resmgr's schema and pushed to the local
cri-resmgr over its config socket: at most once per --min-push-interval, retried
with backoff while cri-resmgr is unreachable, and never re-pushed unchanged. The
outcome is reported as a Kubernetes Event and the node annotations
cri-resource-manager.intel.com/config-source and .../config-error. Adjustment
resources (adjustments.criresmgr.intel.com/v1alpha1) in the same namespace are
pushed too; their per-node errors are written to status.nodes[NODE].errors.

A staged config rollout (the ConfigMap cri-resmgr-rollout, written by the
extension) names canary nodes: on a canary the agent pushes the candidate
ConfigMaps cri-resmgr-candidate.* instead (same precedence), reports the outcome
in the node annotation cri-resource-manager.intel.com/config-rollout, and after a
refusal pushes the last good config back at once. Other nodes stay on the
cri-resmgr-config.* ConfigMaps.

Every --placement-events-period it reads where cri-resmgr's policy placed each
container and posts an Event on the pod when that is new or changed: CPUsPinned
(cpuset, memory nodes, pool) or NotPinned with the reason (not-guaranteed,
fractional-cpu, not-enough-free-cpus, ...), rate-limited by a token bucket.

It serves the Agent API on --agent-socket, which cri-resmgr uses for node
operations and cri-resmgr-agent-probe for health.

With --metrics-address it serves cri-resmgr's /metrics on the pod network: each
GET /metrics is read from cri-resmgr's --metrics-socket (--relay-metrics-socket);
503 with the reason when cri-resmgr cannot be read. Any peer that reaches the port
may read: restrict it with a NetworkPolicy (the chart admits vpn-shoot only).
"""

EPILOG = """\
environment:
  NODE_NAME   name of the node this agent runs on (required; from the downward API)

examples:
  NODE_NAME=worker-1 cri-resmgr-agent                       # in-cluster
  NODE_NAME=worker-1 cri-resmgr-agent --kubeconfig ~/.kube/config --config-socket /tmp/cfg.sock
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cri-resmgr-agent", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None,
                   help="kubeconfig file (default: $KUBECONFIG, else the in-cluster service account)")
    p.add_argument("--namespace", default=CONFIG_NAMESPACE,
                   help=f"namespace of the ConfigMaps and Adjustments (default: {CONFIG_NAMESPACE})")
    p.add_argument("--config-socket", default=DEFAULT_CONFIG_SOCKET,
                   help=f"cri-resmgr's config API socket to push to (default: {DEFAULT_CONFIG_SOCKET})")
    p.add_argument("--agent-socket", default=DEFAULT_AGENT_SOCKET,
                   help=f"socket to serve the Agent API on (default: {DEFAULT_AGENT_SOCKET})")
    p.add_argument("--min-push-interval", type=float, default=1.0, metavar="SECONDS",
                   help="rate limit: at most one push per this many seconds; edits in between are "
                        "coalesced into one push of the latest state (default: 1)")
    p.add_argument("--max-retry-interval", type=float, default=30.0, metavar="SECONDS",
                   help="upper bound of the retry backoff while cri-resmgr is unreachable (default: 30)")
    p.add_argument("--metrics-address", default="", metavar="[HOST]:PORT",
                   help="serve cri-resmgr's /metrics here, e.g. ':8891' (default: off)")
    p.add_argument("--relay-metrics-socket", default=DEFAULT_RELAY_METRICS_SOCKET, metavar="PATH",
                   help=f"cri-resmgr's /metrics unix socket to forward (default: {DEFAULT_RELAY_METRICS_SOCKET})")
    p.add_argument("--placement-events-period", type=float, default=10.0, metavar="SECONDS",
                   help="how often cri-resmgr's placements are read and new or changed ones posted as Events on "
                        "their pods (CPUsPinned, NotPinned); 0 turns them off (default: 10)")
    p.add_argument("--placement-events-rate", type=float, default=1.0, metavar="PER_SECOND",
                   help="placement Events posted per second at most, after a burst of "
                        "--placement-events-burst (default: 1)")
    p.add_argument("--placement-events-burst", type=int, default=20, metavar="N",
                   help="placement Events that may be posted at once (default: 20)")
    p.add_argument("--no-adjustments", action="store_true",
                   help="do not watch Adjustment resources (e.g. when their CRD is not installed)")
    add_logging_arguments(p, default_format="json")
    return p


class Agent:
    """The running agent; ``stop()`` ends it."""

    def __init__(self, args: argparse.Namespace, node: str, api: client.ApiClient) -> None:
        self.stop_event = threading.Event()
        self.state = AgentState(node)
        self.args = args
        self.target = ConfigSocketTarget(args.config_socket, on_connection_lost=self.state.changed.set)
        self.pusher = Pusher(self.state, self.target, KubeReporter(api, node, args.namespace),
                             min_interval=args.min_push_interval, retry_max=args.max_retry_interval)
        core = client.CoreV1Api(api)
        self.watchers = [
            ListWatcher("configmaps", core.list_namespaced_config_map, self.state.replace_config_maps,
                        self.state.config_map_event, self.stop_event, namespace=args.namespace),
            ListWatcher("node", core.list_node, self.state.replace_nodes, self.state.node_event, self.stop_event,
                        field_selector=f"metadata.name={node}"),
        ]
        if not args.no_adjustments:
            custom = client.CustomObjectsApi(api)
            self.watchers.append(ListWatcher(
                "adjustments", custom.list_namespaced_custom_object, self.state.replace_adjustments,
                self.state.adjustment_event, self.stop_event, optional=True, group=ADJUSTMENT_GROUP,
                version=ADJUSTMENT_VERSION, namespace=args.namespace, plural=ADJUSTMENT_PLURAL))
        self.server = serve_agent(AgentServicer(api, node, self.health), args.agent_socket)
        self.placement_events = None
        if args.placement_events_period > 0:
            self.placement_events = PlacementEvents(
                self.target.get_placements, kube_poster(api, node), period=args.placement_events_period,
                bucket=TokenBucket(args.placement_events_rate, args.placement_events_burst))

    def health(self, query: str) -> str:
        for w in self.watchers:
            if not w.synced.is_set():
                return f"not synced with the Kubernetes API yet ({w.what}: {w.last_error or 'listing'})"
        return self.pusher.health(query)

    def start(self) -> None:
        for w in self.watchers:
            w.start()
        # Push only once the first lists are in, so a partial view never selects the wrong ConfigMap.
        for w in self.watchers:
            while not w.synced.wait(5) and not self.stop_event.is_set():
                log.info("waiting for the first list of %s: %s", w.what, w.last_error or "in progress")
        if not self.stop_event.is_set():
            self.pusher.start()
            if self.placement_events is not None:
                self.placement_events.start()
            log.info("agent running", extra={"node": self.state.node})

    def stop(self) -> None:
        self.stop_event.set()
        self.pusher.stop()
        if self.placement_events is not None:
            self.placement_events.stop()
        stop_unix(self.server, self.args.agent_socket)
        self.target.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging_from_args(args, root_package="resmgr")
    node = os.environ.get("NODE_NAME", "").strip()
    if not node:
        sys.stderr.write("cri-resmgr-agent: NODE_NAME is not set; set it to this node's name "
                         "(in a pod: env NODE_NAME from fieldRef spec.nodeName)\n")
        return 2
    if args.min_push_interval < 0 or args.max_retry_interval <= 0:
        sys.stderr.write("cri-resmgr-agent: --min-push-interval must be >= 0 and --max-retry-interval > 0\n")
        return 2
    if args.placement_events_period < 0 or args.placement_events_rate <= 0 or args.placement_events_burst < 1:
        sys.stderr.write("cri-resmgr-agent: --placement-events-period must be >= 0, --placement-events-rate > 0 "
                         "and --placement-events-burst >= 1\n")
        return 2
    try:
        api = load_api_client(args.kubeconfig)
    except KubeConfigError as exc:
        sys.stderr.write(f"cri-resmgr-agent: {exc}\n")
        return 2
    try:
        agent = Agent(args, node, api)
    except (OSError, RuntimeError) as exc:
        sys.stderr.write(f"cri-resmgr-agent: cannot serve the Agent API on {args.agent_socket}: {exc}\n")
        return 1
    metrics = None
    if args.metrics_address:
        try:
            metrics = serve_forwarded_metrics(args.metrics_address, args.relay_metrics_socket)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"cri-resmgr-agent: cannot serve metrics on {args.metrics_address}: {exc}\n")
            agent.stop()
            return 1
    done = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        agent.stop_event.set()
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("starting cri-resmgr-agent", extra={"node": node, "config_socket": args.config_socket,
                                                  "agent_socket": args.agent_socket})
    agent.start()
    done.wait()
    if metrics is not None:
        metrics.shutdown()
    agent.stop()
    return 0
