"""Command line of gardener-extension-cri-resmgr."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from extension.leader_election import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_LEASE_NAME,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    check_durations,
    in_cluster_namespace,
)

DESCRIPTION = """\
gardener-extension-cri-resmgr is a kopf operator for the seed cluster. It reacts
to Extension resources of type cri-resmgr-extension, merges the operator's base
configs with the shoot's providerConfig, validates them, renders the internal
installation chart with helm and deploys it to the shoot as a ManagedResource.
It reports health and reverses everything when the extension is disabled.

Gardener contract: the operation annotation gardener.cloud/operation
(reconcile is removed before reconciling, restore/migrate after success,
wait-for-state is ignored), the finalizer
extensions.gardener.cloud/cri-resmgr-extension, status lastOperation/lastError/
observedGeneration, the condition SystemComponentsHealthy and the heartbeat
Lease gardener-extension-heartbeat.

Base configs: a change of the ConfigMap gardener-extension-cri-resmgr-configs
reaches every Extension without a restart: each successful reconcile records
the digest of the base configs it used, and an Extension whose record differs
from the ConfigMap gets gardener.cloud/operation=reconcile (not while it is
being processed).

Environment: EXTENSION_CONFIGMAP_NAMESPACE (where the base configs ConfigMap
gardener-extension-cri-resmgr-configs lives), IMAGEVECTOR_OVERWRITE (image
vector overwrite file), KUBECONFIG (outside a cluster), POD_NAMESPACE
(default heartbeat namespace).
"""


def default_charts_dir() -> Path:
    env = os.environ.get("CRI_RESMGR_CHARTS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "charts"


def max_unavailable(text: str) -> str | int:
    """A DaemonSet maxUnavailable: a count >= 1 or a percentage 1%..100%."""
    value = text.strip()
    number = value[:-1] if value.endswith("%") else value
    if not number.isdigit() or not (1 <= int(number) <= (100 if value.endswith("%") else 10**6)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a node count >= 1 or a percentage 1%..100%")
    return value if value.endswith("%") else int(number)


def leader_election_problem(args: argparse.Namespace) -> str | None:
    """Why the leader election flags cannot work, or None; fills in the namespace from the cluster."""
    if not args.leader_election:
        return None
    problem = check_durations(args.leader_election_lease_duration, args.leader_election_renew_deadline,
                              args.leader_election_retry_period)
    if problem:
        return f"--leader-election-*: {problem}"
    args.leader_election_namespace = args.leader_election_namespace or in_cluster_namespace()
    if not args.leader_election_namespace:
        return ("--leader-election-namespace is required: not running in a cluster, so the pod's namespace "
                "is unknown (or pass --no-leader-election for a single replica)")
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gardener-extension-cri-resmgr", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                   help="kubeconfig of the seed (default: in-cluster service account, then $KUBECONFIG)")
    p.add_argument("--ignore-operation-annotation", action="store_true",
                   help="reconcile on generation changes instead of waiting for gardener.cloud/operation")
    p.add_argument("--max-concurrent-reconciles", type=int, default=10, metavar="N",
                   help="Extensions processed at the same time (default: 10)")
    p.add_argument("--health-interval", type=float, default=30.0, metavar="SECONDS",
                   help="seconds between health checks of each Extension (default: 30)")
    p.add_argument("--base-configs-interval", type=float, default=10.0, metavar="SECONDS",
                   help="how often each Extension is compared with the base configs ConfigMap; one that was "
                        "last reconciled with other base configs gets gardener.cloud/operation=reconcile "
                        "(default: 10)")
    p.add_argument("--heartbeat-interval", type=float, default=30.0, metavar="SECONDS",
                   help="seconds between renewals of the heartbeat Lease (default: 30)")
    p.add_argument("--heartbeat-namespace", default=os.environ.get("POD_NAMESPACE"),
                   help="namespace of the Lease gardener-extension-heartbeat (default: $POD_NAMESPACE; "
                        "no heartbeat when unset)")
    p.add_argument("--uninstall-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="on delete, report an error if the uninstall rollout is not healthy after this long; "
                        "waiting continues (default: 600)")
    p.add_argument("--config-rollout-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="a changed dynamic config goes to one canary node per worker pool first; a canary that "
                        "has not reported it applied after this long stops the rollout (default: 300)")
    p.add_argument("--uninstall-max-unavailable", type=max_unavailable, default="50%", metavar="N|N%",
                   help="how many selected nodes uninstall at once (the installer DaemonSet's maxUnavailable "
                        "in uninstall mode): a count or a percentage (default: 50%%, 100 nodes in about two "
                        "per-node uninstall times; docs/operations/node-safety.md, 'How many nodes an uninstall takes "
                        "at once')")
    # Gardener waits for ManagedResources every 2 s (v1.149.3 pkg/utils/managedresources/managedresources.go,
    # IntervalWait); a wait here costs two GETs of the seed API.
    p.add_argument("--poll-interval", type=float, default=2.0, metavar="SECONDS",
                   help="how often a waiting reconcile or delete checks again: a ManagedResource's health, the "
                        "nodes' install records (default: 2, Gardener's own interval)")
    p.add_argument("--retry-delay-min", type=float, default=5.0, metavar="SECONDS",
                   help="first retry delay after an error; doubles per retry (default: 5)")
    p.add_argument("--retry-delay-max", type=float, default=60.0, metavar="SECONDS",
                   help="longest retry delay (default: 60); configuration errors are re-checked "
                        "at least every 30 s, so a fixed config is picked up quickly")
    p.add_argument("--charts-dir", type=Path, default=default_charts_dir(),
                   help="directory holding internal/cri-resmgr-installation and images.yaml "
                        "(default: $CRI_RESMGR_CHARTS_DIR or the charts next to this package)")
    p.add_argument("--images-file", type=Path, default=None,
                   help="image vector (default: <charts-dir>/images.yaml)")
    p.add_argument("--helm", default=None, help="helm binary (default: $HELM, PATH, then the dev cache)")
    le = p.add_argument_group(
        "leader election",
        "Replicas compete for a coordination.k8s.io/v1 Lease in their own namespace, as\n"
        "Gardener's Go extensions do (controller-runtime). Only the holder runs the operator;\n"
        "a standby takes over once the holder has not renewed for the lease duration; a holder\n"
        "that cannot renew within the renew deadline exits with 1 and is restarted as a\n"
        "candidate; a holder stopped by SIGTERM releases the Lease, so a standby takes over\n"
        "at its next retry. Needs get, create and update on leases in that namespace.")
    le.add_argument("--leader-election", action=argparse.BooleanOptionalAction, default=True,
                    help="elect one active replica (default: on; --no-leader-election for a single replica)")
    le.add_argument("--standalone", dest="leader_election", action="store_false",
                    help="deprecated alias of --no-leader-election")
    le.add_argument("--leader-election-id", default=DEFAULT_LEASE_NAME, metavar="NAME",
                    help=f"name of the Lease (default: {DEFAULT_LEASE_NAME})")
    le.add_argument("--leader-election-namespace", default=None, metavar="NAMESPACE",
                    help="namespace of the Lease (default: the pod's namespace from its service account; "
                         "required outside a cluster; the chart passes $(POD_NAMESPACE))")
    le.add_argument("--leader-election-lease-duration", type=int, default=DEFAULT_LEASE_DURATION,
                    metavar="SECONDS", help="how long a standby waits after the last renewal it saw before it "
                    f"takes the Lease over (default: {DEFAULT_LEASE_DURATION})")
    le.add_argument("--leader-election-renew-deadline", type=int, default=DEFAULT_RENEW_DEADLINE,
                    metavar="SECONDS", help="how long the holder keeps trying to renew before it gives up and "
                    f"exits; shorter than the lease duration (default: {DEFAULT_RENEW_DEADLINE})")
    le.add_argument("--leader-election-retry-period", type=int, default=DEFAULT_RETRY_PERIOD,
                    metavar="SECONDS", help="how often the holder renews and a standby tries to acquire; the "
                    f"renew deadline must exceed 1.2 x this (default: {DEFAULT_RETRY_PERIOD})")
    p.add_argument("--namespace", action="append", default=[], metavar="PATTERN",
                   help="watch only these namespaces (repeatable; default: all namespaces)")
    p.add_argument("--liveness-endpoint", default=None, metavar="URL",
                   help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--metrics-bind-address", default="", metavar="HOST:PORT",
                   help="serve this controller's own Prometheus metrics (operations, durations, health checks, "
                        "leadership) at http://HOST:PORT/metrics; empty (default): off. The chart serves them on "
                        "0.0.0.0:8081 with the annotations Gardener's seed Prometheus scrapes by")
    p.add_argument("--metrics-port", type=int, default=8891,
                   help="port of cri-resmgr's metrics on the nodes (default: 8891)")
    p.add_argument("--metrics-allow-pod-network", action="store_true",
                   help="also let the shoot's pod network (spec.networking.pods) read cri-resmgr's TCP /metrics "
                        "on the nodes directly; not needed for monitoring, which scrapes through the agent pods "
                        "(NetworkPolicy: vpn-shoot only); off by default because it admits every pod")
    p.add_argument("--log-format", choices=("json", "text"), default="json",
                   help="json: one JSON object per line (default); text: human readable")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from extension import chart_render, logs
    from extension import constants as c
    from extension.errors import ConfigurationError
    from extension.gardener import imagevector

    logs.setup(args.log_format, args.log_level)
    log = logging.getLogger("extension")

    chart_dir = args.charts_dir / "internal" / "cri-resmgr-installation"
    images_file = args.images_file or args.charts_dir / "images.yaml"
    try:
        helm = chart_render.find_helm(args.helm)
        if not (chart_dir / "Chart.yaml").is_file():
            raise ConfigurationError("--charts-dir", f"{chart_dir} holds no Chart.yaml")
        vector = imagevector.load(images_file)
        for name in (c.INSTALLER_IMAGE, c.AGENT_IMAGE):
            if not any(img.name == name for img in vector):
                raise ConfigurationError(str(images_file), f"image {name!r} missing")
    except (ConfigurationError, chart_render.RenderError) as err:
        sys.stderr.write(f"gardener-extension-cri-resmgr: {err}\n")
        return 2
    for flag in ("max_concurrent_reconciles",):
        if getattr(args, flag) < 1:
            sys.stderr.write(f"gardener-extension-cri-resmgr: --{flag.replace('_', '-')} must be >= 1\n")
            return 2
    for flag in ("health_interval", "base_configs_interval", "heartbeat_interval", "poll_interval",
                 "retry_delay_min", "retry_delay_max"):
        if getattr(args, flag) <= 0:
            sys.stderr.write(f"gardener-extension-cri-resmgr: --{flag.replace('_', '-')} must be > 0\n")
            return 2
    problem = leader_election_problem(args)
    if problem:
        sys.stderr.write(f"gardener-extension-cri-resmgr: {problem}\n")
        return 2

    from extension.operator import run

    return run(args, helm=helm, chart_dir=chart_dir, images_file=images_file, log=log)


if __name__ == "__main__":
    sys.exit(main())
