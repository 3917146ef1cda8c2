"""Assemble the operator (API client, actuator, reconciler, kopf registry and settings) and run it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import urllib.parse
from pathlib import Path

import aiohttp.web
import kopf

from extension import leader_election
from extension.actuator import Actuator, ActuatorSettings
from extension.gardener.kube import Apis, load_api_client
from extension.handlers import build_registry, kopf_settings
from extension.leader_election import ElectionSettings, LeaderElector, Outcome
from extension.metrics import ExtensionMetrics
from extension.reconciler import OperatorSettings, Reconciler


def run(args: argparse.Namespace, *, helm: str, chart_dir: Path, images_file: Path,
        log: logging.Logger) -> int:
    try:
        api_client = load_api_client(args.kubeconfig, pool_size=args.max_concurrent_reconciles + 8)
    except Exception as err:  # no or broken kubeconfig: say so instead of a traceback
        sys.stderr.write(f"gardener-extension-cri-resmgr: cannot load Kubernetes credentials: {err}\n")
        return 2
    apis = Apis(api_client)
    actuator = Actuator(apis, ActuatorSettings(
        chart_dir=chart_dir, images_file=images_file, helm=helm,
        imagevector_overwrite=os.environ.get("IMAGEVECTOR_OVERWRITE") or None,
        configmap_namespace=os.environ.get("EXTENSION_CONFIGMAP_NAMESPACE") or None,
        uninstall_timeout=args.uninstall_timeout, uninstall_max_unavailable=args.uninstall_max_unavailable,
        config_rollout_timeout=args.config_rollout_timeout, poll_interval=args.poll_interval,
        metrics_port=args.metrics_port, metrics_allow_pod_network=args.metrics_allow_pod_network))
    settings = OperatorSettings(
        ignore_operation_annotation=args.ignore_operation_annotation,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        health_interval=args.health_interval, base_configs_interval=args.base_configs_interval,
        heartbeat_interval=args.heartbeat_interval,
        heartbeat_namespace=args.heartbeat_namespace,
        retry_delay_min=args.retry_delay_min, retry_delay_max=args.retry_delay_max)
    metrics = ExtensionMetrics()
    if args.metrics_bind_address:
        try:
            metrics.serve(args.metrics_bind_address)
        except (OSError, ValueError) as err:
            sys.stderr.write(f"gardener-extension-cri-resmgr: cannot serve metrics on "
                             f"{args.metrics_bind_address}: {err}\n")
            return 2
    registry = build_registry(Reconciler(apis, actuator, settings, metrics))

    @kopf.on.login(registry=registry)
    def login(**kwargs: object) -> kopf.ConnectionInfo | None:
        return _connection_info(api_client)

    elector = None
    if args.leader_election:
        election = ElectionSettings(
            namespace=args.leader_election_namespace, name=args.leader_election_id,
            identity=leader_election.identity(), lease_duration=args.leader_election_lease_duration,
            renew_deadline=args.leader_election_renew_deadline, retry_period=args.leader_election_retry_period)
        elector = LeaderElector(leader_election.lease_lock(api_client, election), election)
    log.info("starting", extra={"charts": str(chart_dir), "helm": helm,
                                "ignore_operation_annotation": settings.ignore_operation_annotation,
                                "leader_election": elector.settings.lease if elector else "off",
                                "identity": elector.settings.identity if elector else None})
    stop = asyncio.Event()

    async def run_kopf(stop_flag: asyncio.Event) -> None:
        # standalone: no kopf peering; leader election (or a single replica) makes this the only worker.
        metrics.leader.set(1)
        try:
            await kopf.operator(
                registry=registry, settings=kopf_settings(settings), standalone=True,
                clusterwide=not args.namespace, namespaces=args.namespace,
                liveness_endpoint=args.liveness_endpoint, stop_flag=stop_flag)
        finally:
            metrics.leader.set(0)

    async def main() -> Outcome | None:
        loop = asyncio.get_running_loop()
        # Until kopf starts (a standby waiting for the lease); kopf installs its own handlers, which stop it.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if elector is None:
            await run_kopf(stop)
            return None
        probe = StandbyLiveness(args.liveness_endpoint)
        await probe.start()

        async def lead(stop_flag: asyncio.Event) -> None:
            await probe.stop()  # kopf serves the endpoint from here on
            await run_kopf(stop_flag)

        try:
            return await elector.lead(stop, lead)
        finally:
            await probe.stop()

    outcome = asyncio.run(main())
    if outcome is Outcome.LOST:
        # As client-go's callers do (klog.Fatal): a reconcile thread still running must not keep writing
        # while the new leader works, and interpreter shutdown would wait for it. The restart is a candidate.
        log.error("exiting with 1 after losing the lease; the restarted container is a candidate again")
        logging.shutdown()
        os._exit(1)
    log.info("stopped", extra={"outcome": outcome.value if outcome else "stopped"})
    return 0


class StandbyLiveness:
    """Answer the liveness probe while waiting for the lease.

    A standby runs no kopf, so nothing would serve kopf's liveness endpoint and kubelet would restart the
    standby over and over. The answer comes from the event loop that runs the election, so it also says
    that this loop is alive.
    """

    def __init__(self, endpoint: str | None) -> None:
        self.endpoint = endpoint
        self._runner: aiohttp.web.AppRunner | None = None

    async def start(self) -> None:
        if not self.endpoint:
            return
        url = urllib.parse.urlsplit(self.endpoint)

        async def alive(request: aiohttp.web.Request) -> aiohttp.web.Response:
            return aiohttp.web.json_response({"standby": True})

        app = aiohttp.web.Application()
        app.add_routes([aiohttp.web.get(url.path or "/", alive)])
        self._runner = aiohttp.web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await aiohttp.web.TCPSite(self._runner, url.hostname or "127.0.0.1", url.port or 80).start()

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


def _connection_info(api_client: object) -> kopf.ConnectionInfo:
    """Hand kopf the same credentials the Kubernetes client uses."""
    cfg = api_client.configuration  # type: ignore[attr-defined]
    # In-cluster tokens rotate; kopf calls this login again on 401, so read the current one.
    hook = getattr(cfg, "refresh_api_key_hook", None)
    if hook is not None:
        hook(cfg)
    token = None
    scheme = None
    auth = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    if auth:
        scheme, _, token = auth.partition(" ") if " " in auth else ("Bearer", "", auth)
    return kopf.ConnectionInfo(
        server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
        username=cfg.username or None, password=cfg.password or None,
        scheme=scheme, token=token,
        certificate_path=cfg.cert_file, private_key_path=cfg.key_file,
        expiration=None)

