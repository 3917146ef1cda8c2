"""Command line of cri-resmgr: parse flags, load config, run the relay until SIGTERM."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from resmgr import __version__
from resmgr.config import ConfigError, ConfigSections
from resmgr.config.files import FORCE, StartupConfigs
from resmgr.configplane import ConfigPlaneHandle, start_config_plane
from resmgr.configplane.hook import AdjustingHook
from resmgr.configplane.node_resources import NodeResourcesNotice
from resmgr.configplane.plane import AGENT_SOURCE
from resmgr.configplane.rm_applier import ResourceManagerApplier
from resmgr.logsetup import parse_debug_modules, set_debug_modules, setup_logging
from resmgr.manager.cache import CacheError, reset_cache
from resmgr.manager.cpu_usage import Rebalancer
from resmgr.manager.resource_manager import ResourceManager
from resmgr.options import SHUTDOWN_MARGIN_S, build_parser
from resmgr.policy.registry import available_policies
from resmgr.relay.dump import Dumper
from resmgr.relay.metrics import RelayMetrics, start_metrics_servers
from resmgr.relay.settings import RelaySettings, relay_settings
from resmgr.relay.startup import ConfigNotice, StartupError, load_startup_files, without_unfit_files
from resmgr.rpc.sockets import SocketInUse
from resmgr.topology import TopologyError, discover_topology

if TYPE_CHECKING:
    from resmgr.nri.frontend import NriFrontend
    from resmgr.relay.server import Relay

log = logging.getLogger("resmgr.cli")

def _reset_state(args: argparse.Namespace) -> int:
    """--reset-policy / --reset-config: clear that part of the cache and exit (the relay must be stopped)."""
    try:
        cleared = reset_cache(args.relay_dir, policy=args.reset_policy, config=args.reset_config,
                              relay_socket=args.relay_socket)
    except CacheError as err:
        sys.stderr.write(f"cri-resmgr: {err}\n")
        return 1
    what = ", ".join(cleared) or "nothing"
    log.info("reset %s in %s", what, args.relay_dir)
    print(f"cri-resmgr: cleared {what} in {args.relay_dir}")
    return 0


def build_resource_manager(args: argparse.Namespace, files: StartupConfigs) -> ResourceManager:
    """The resource manager from the flags and the files read at startup; raises ConfigError or TopologyError."""
    return ResourceManager(discover_topology(args.sysfs_root), relay_dir=args.relay_dir,
                           fallback_config=files.fallback_config, force_config=files.force_config,
                           disable_policy_switch=args.disable_policy_switch, sysfs_root=args.sysfs_root,
                           background_save=True)


def exit_by_force_after(seconds: float) -> None:
    """Should shutting down get stuck, print every thread's stack to stderr and exit with status 1
    after ``seconds``: a relay that never exits holds its node's poweroff until systemd kills it."""
    faulthandler.dump_traceback_later(seconds, exit=True)  # its own C thread: works even if Python is stuck


class _Runner:
    """Holds the running relay and config plane, and reacts to signals."""

    def __init__(self, args: argparse.Namespace, relay: Relay | NriFrontend, settings: RelaySettings,
                 metrics: RelayMetrics, dumper: Dumper | None = None) -> None:
        self.args = args
        self.relay = relay
        self.dumper = dumper  # the relay's; NRI sees no CRI messages, so it has none
        self.settings = settings
        self.metrics = metrics
        self.plane: ConfigPlaneHandle | None = None
        self.notice = ConfigNotice(None)
        self.rm: ResourceManager | None = None
        self.node_resources = NodeResourcesNotice(None)  # the agent is connected once the config plane runs
        self.reload = threading.Event()
        self.wake = threading.Event()

    def on_terminate(self, signum: int, _frame: Any) -> None:
        limit = self.args.shutdown_grace + SHUTDOWN_MARGIN_S
        log.info("received %s; shutting down", signal.Signals(signum).name, extra={"force_exit_after_s": limit})
        exit_by_force_after(limit)
        self.relay.stopping.set()
        self.wake.set()

    def on_hangup(self, _signum: int, _frame: Any) -> None:
        self.reload.set()
        self.wake.set()

    def run_until_stopped(self) -> None:
        while not self.relay.stopping.is_set():
            self.wake.wait()
            self.wake.clear()
            if self.reload.is_set():
                self.reload.clear()
                self.reload_config()

    def apply_relay_sections(self, config: ConfigSections, source: str) -> None:
        """Apply the relay's own sections (dump, logger) of a config that became active."""
        settings = relay_settings(config)
        self.notice.set(None)  # a config works again: nothing runs without the config it was given
        if self.dumper is not None:
            self.dumper.reconfigure(settings.dump)
        set_debug_modules(parse_debug_modules(self.args.debug) + settings.debug_modules,
                          root_package="resmgr", base_level=self.args.log_level)
        self.settings = settings

    def config_applied(self, config: ConfigSections, source: str) -> None:
        """A config became active: the relay's own sections, and what its policy publishes on the node."""
        self.apply_relay_sections(config, source)
        if self.rm is not None:
            self.node_resources.set(self.rm.policy.node_resources())

    def reload_config(self) -> None:
        """SIGHUP (--force-config-signal): the config plane re-reads --force-config, as it applies every other
        config."""
        sig = self.args.force_config_signal
        if not self.args.force_config or self.plane is None:
            log.info("%s: no --force-config to reload", sig)
            return
        problem = self.plane.reload_force_config()
        if problem:
            log.error("%s: keeping the current config: %s", sig, problem)
            self.metrics.config_errors.labels(FORCE).inc()
            self.notice.set(f"{FORCE} {self.args.force_config} not used ({sig}): {problem}; the previous config "
                            "stays")
        else:
            log.info("%s: reloaded forced config", sig, extra={"source": self.args.force_config})


def main(argv: list[str] | None = None) -> int:
    """Run cri-resmgr."""
    args = build_parser().parse_args(argv)
    if args.list_policies:
        print("\n".join(available_policies()))
        return 0
    setup_logging(fmt=args.log_format, level=args.log_level, debug_modules=parse_debug_modules(args.debug),
                  root_package="resmgr")
    if args.reset_policy or args.reset_config:
        return _reset_state(args)
    rebalancer: Rebalancer | None = None
    metrics = RelayMetrics()
    try:
        # The files are read once, here, and checked first: a bad file is reported with its path before
        # any state is touched, and set aside, so kubelet's runtime never goes down for a config.
        files, problems = load_startup_files(args.force_config, args.fallback_config)
        rm, files = without_unfit_files(lambda f: build_resource_manager(args, f), files, problems)
        config, source = rm.config, rm.config_source  # precedence decided there, with the cache
        source = files.describe(source)
        # The config the manager chose was checked when it was read (a file, the cache): only typed here.
        settings = relay_settings(ConfigSections.of(config))
    except (ConfigError, TopologyError, CacheError) as err:
        sys.stderr.write(f"cri-resmgr: {err}\n")
        return 2
    for problem in problems:
        log.error("%s", problem.describe(source), extra={"config_source": problem.source, "path": problem.path})
        metrics.config_errors.labels(problem.source).inc()
    if settings.debug_modules:
        set_debug_modules(parse_debug_modules(args.debug) + settings.debug_modules, root_package="resmgr",
                          base_level=args.log_level)
    log.info("starting cri-resmgr %s", __version__, extra={"config": source, "policy": settings.policy})
    os.makedirs(args.relay_dir, exist_ok=True)
    metrics_servers = start_metrics_servers(metrics, args.metrics_address or settings.metrics_address,
                                            args.metrics_allow, args.metrics_socket)
    hook = AdjustingHook(rm, outbox=rm.outbox)
    metrics.pool_containers.collect = rm.pool_containers
    metrics.controller_failures.collect = rm.controllers.failure_counts
    metrics.watch_pools(rm.pool_stats)
    metrics.watch_placements(rm.unpinned_counts, rm.drifted_containers)
    relay: Relay | NriFrontend
    dumper: Dumper | None = None
    # Each front end is imported only when it runs: NRI's message descriptors would add ~0.9 MB to the
    # relay's resident memory, and the relay's transport (splice, interception, exits) ~1 MB to the plugin's.
    if args.frontend == "nri":
        # NRI mode: containerd calls us; no relay socket is served and kubelet stays on containerd.
        from resmgr.nri.frontend import NriFrontend

        relay = NriFrontend(hook, metrics, args.nri_socket, args.nri_plugin_name, args.nri_plugin_index)
        apply_updates = relay.apply_updates
    else:
        from resmgr.relay.server import Relay

        dumper = Dumper(settings.dump, directory=args.relay_dir)
        relay = Relay(relay_socket=args.relay_socket, runtime_socket=args.runtime_socket,
                      image_socket=args.image_socket, hook=hook, metrics=metrics,
                      dumper=dumper, pid_file=args.pid_file or None,
                      max_workers=args.workers,
                      runtime_wait_timeout=args.runtime_wait_timeout, transport=args.transport,
                      drift_check_period=args.resync_period)
        apply_updates = relay.interceptor.apply_updates
    runner = _Runner(args, relay, settings, metrics, dumper)
    signal.signal(signal.SIGTERM, runner.on_terminate)
    signal.signal(signal.SIGINT, runner.on_terminate)
    signal.signal(signal.Signals[args.force_config_signal], runner.on_hangup)
    try:
        relay.start()
        # Every update no CRI call returns (cold starts, rebalancing, configs, Adjustments) goes out through
        # the manager's outbox, bound to the relay once it runs.
        rm.outbox.bind(apply_updates)
        runner.rm = rm
        runner.plane = start_config_plane(
            args, ResourceManagerApplier(rm, rm.outbox, runner.config_applied), initial_source=rm.config_source,
            on_agent_refused=lambda _error: metrics.config_errors.labels(AGENT_SOURCE).inc())
        hook.plane = runner.plane.plane
        rebalancer = Rebalancer(rm, rm.outbox, args.rebalance_interval).start()
        runner.notice = ConfigNotice(runner.plane.agent)
        runner.node_resources.agent = runner.plane.agent
        runner.node_resources.set(rm.policy.node_resources())
        if problems:
            runner.notice.set("; ".join(p.describe(source) for p in problems))
        runner.run_until_stopped()
    except (StartupError, SocketInUse, OSError) as err:
        log.error("cannot start: %s", err)
        runner.notice.stop()
        if runner.plane is not None:
            runner.plane.stop()
        relay.stop(grace=0)
        return 1
    finally:
        if rebalancer is not None:
            rebalancer.stop()
        for server in metrics_servers:
            server.shutdown()
        rm.close()
    runner.notice.stop()
    runner.node_resources.stop()
    if runner.plane is not None:
        runner.plane.stop()
    relay.stop(grace=args.shutdown_grace)  # the cache is closed: what the drain changes is written at once
    return 0
