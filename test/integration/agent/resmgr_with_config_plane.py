"""Test-only launcher: cri-resmgr (relay + resource manager) with the config plane wired in.

The cri-resmgr CLI (resmgr/cli.py) does not wire the resource manager and the config
plane yet; this does it the way the CLI is expected to, so that the integration tests
run a real process with the relay socket, the config socket and the agent socket.
Usage: python resmgr_with_config_plane.py <cri-resmgr flags>
"""

from __future__ import annotations

import signal
import sys
import threading

from resmgr.cli import build_parser
from resmgr.configplane import start_config_plane
from resmgr.configplane.hook import AdjustingHook
from resmgr.configplane.rm_applier import ResourceManagerApplier
from resmgr.dump import Dumper
from resmgr.logsetup import parse_debug_modules, set_debug_modules, setup_logging
from resmgr.relay.server import Relay
from resmgr.relay.settings import settings_from_config
from resmgr.resource_manager import ResourceManager


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(fmt=args.log_format, level=args.log_level, debug_modules=parse_debug_modules(args.debug),
                  root_package="resmgr")
    rm = ResourceManager.from_options(relay_dir=args.relay_dir, fallback_config=args.fallback_config,
                                      force_config=args.force_config, cache_fsync=False)
    settings = settings_from_config(rm.config, rm.config_source)
    hook = AdjustingHook(rm)  # re-applies Adjustments to containers that start later
    relay = Relay(relay_socket=args.relay_socket, runtime_socket=args.runtime_socket, hook=hook,
                  dumper=Dumper(settings.dump), pid_file=args.pid_file or None)

    def on_applied(config: dict, source: str) -> None:
        applied = settings_from_config(config, source)
        relay.dumper.reconfigure(applied.dump)
        set_debug_modules(parse_debug_modules(args.debug) + applied.debug_modules, root_package="resmgr",
                          base_level=args.log_level)

    applier = ResourceManagerApplier(rm, lambda updates, why: relay.interceptor.apply_updates(updates, why),
                                     on_applied)
    stop = threading.Event()
    hup = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: hup.set())
    relay.start()
    plane = start_config_plane(args, applier, initial_source=rm.config_source)
    hook.plane = plane.plane
    while not stop.wait(0.2):
        if hup.is_set():
            hup.clear()
            plane.reload_force_config()
    plane.stop()
    relay.stop(grace=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
