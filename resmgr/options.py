"""cri-resmgr's flag table and the node paths every program agrees on; nothing behind it but argparse.

The installer checks EXTRA_OPTIONS against this parser (``resmgr.config.extra_options``) and the
extension checks it before anything reaches a node, so neither loads the relay to read a flag line.
The socket, state and pid file paths are defined here once: the relay, the agent, the installer and
the cache all take them from this module.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from resmgr import __version__
from resmgr.durations import parse_go_duration

DEFAULT_RELAY_SOCKET = "/var/run/cri-resmgr/cri-resmgr.sock"
DEFAULT_RUNTIME_SOCKET = "/var/run/containerd/containerd.sock"
DEFAULT_CONFIG_SOCKET = "/var/run/cri-resmgr/cri-resmgr-config.sock"
DEFAULT_AGENT_SOCKET = "/var/run/cri-resmgr/cri-resmgr-agent.sock"
DEFAULT_PID_FILE = "/var/run/cri-resmgr/cri-resmgr.pid"
# What the installer's unit passes instead of the upstream defaults above: the agent's sockets live in a
# directory of their own (mode 2770, group AGENT_SOCKET_GROUP), so the agent pod mounts only that
# directory, never the CRI socket, and runs as that non-root user and group.
AGENT_SOCKET_DIR = "/var/run/cri-resmgr/agent"
AGENT_SOCKET_GROUP = 65532  # the agent pod's runAsUser/runAsGroup (the image's "nonroot")
AGENT_DIR_CONFIG_SOCKET = f"{AGENT_SOCKET_DIR}/cri-resmgr-config.sock"
AGENT_DIR_AGENT_SOCKET = f"{AGENT_SOCKET_DIR}/cri-resmgr-agent.sock"
AGENT_DIR_METRICS_SOCKET = f"{AGENT_SOCKET_DIR}/cri-resmgr-metrics.sock"
DEFAULT_RELAY_DIR = "/var/lib/cri-resmgr"
# Environment the installer's unit gives cri-resmgr. One malloc arena: the relay's threads run Python under
# one GIL, so glibc's arena per thread bought no speed, only memory that stays after a burst (32 parallel
# pod starts through the relay left 1.9 MB behind; with one arena 0.7 MB; `make bench-relay`, which runs
# the relay with this environment too).
RELAY_ENVIRONMENT: dict[str, str] = {"MALLOC_ARENA_MAX": "1"}
# The node annotation cri-resmgr sets (through the agent's PatchNode) while it runs without a config it was
# given (a bad --force-config/--fallback-config, or a SIGHUP reload that failed); removed once a config works.
RELAY_CONFIG_ERROR_ANNOTATION = "cri-resource-manager.intel.com/relay-config-error"
# splice: copy HTTP/2 frames (fast); grpc: a gRPC server + client per call (can split runtime/image sockets).
TRANSPORTS = ("auto", "splice", "grpc")
# relay: kubelet talks to our socket and we relay CRI; nri: we are an NRI plugin of containerd.
FRONTENDS = ("relay", "nri")
DEFAULT_NRI_SOCKET = "/var/run/nri/nri.sock"
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")

DESCRIPTION = """\
cri-resmgr relays the Container Runtime Interface (CRI) between kubelet and the
container runtime (containerd). Kubelet talks to the relay socket; every call is
forwarded to the runtime, and calls that create, update or remove pods and
containers pass through a resource manager that places containers on CPUs and
memory nodes according to the active policy. Configuration uses
cri-resource-manager's YAML format (sections policy, logger, dump,
instrumentation, ...).

Config sources, highest first: --force-config (disables config from the agent),
the last config the agent pushed and cri-resmgr applied (cached in --relay-dir),
--fallback-config, built-in defaults (policy none).

Signals: SIGTERM/SIGINT drain in-flight calls and exit (by force, with every
thread's stack on stderr, if that takes 30 s more than --shutdown-grace);
SIGHUP (or the signal given with --force-config-signal) re-reads the
--force-config file (dump rules, logger.Debug, policy settings).
"""

EPILOG = """\
examples:
  cri-resmgr --runtime-socket /run/containerd/containerd.sock --fallback-config /etc/cri-resmgr/fallback.cfg
  cri-resmgr --force-config dump.cfg --metrics-address 127.0.0.1:8891   # pure CRI message dumper
"""

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _plugin_index(text: str) -> str:
    if len(text) != 2 or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a two-digit NRI plugin index like 90")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def _duration(text: str) -> float:
    """Seconds, plain (10, 2.5) or as a Go duration like upstream's flags (10s, 1m30s)."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_go_duration(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds or a duration like 30s") \
                from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


# How much longer than --shutdown-grace the rest of a shutdown may take before cri-resmgr exits by
# force, well within systemd's 90 s stop timeout. Its steps take well under a second; each of their
# waits is bounded, and only with every one at its limit (about 40 s, all of them stuck) is this cut short.
SHUTDOWN_MARGIN_S = 30.0

# Caught for shutdown, or cannot be caught at all.
_RESERVED_SIGNALS = ("SIGTERM", "SIGINT", "SIGKILL", "SIGSTOP")


def signal_name(text: str) -> str:
    """A catchable signal's canonical name (SIGHUP, SIGUSR1, ...) from 'SIGUSR1', 'usr1' or '10'."""
    name = text.strip().upper()
    try:
        sig = signal.Signals(int(name)) if name.isdigit() else signal.Signals[name if name.startswith("SIG")
                                                                              else f"SIG{name}"]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a signal name like SIGHUP or SIGUSR1") from None
    if sig.name in _RESERVED_SIGNALS:
        raise argparse.ArgumentTypeError(f"{sig.name} cannot reload the config (it stops cri-resmgr or cannot "
                                         "be caught)")
    return sig.name


def terminal_columns() -> int:
    """The width help is formatted for, found as shutil.get_terminal_size finds it (COLUMNS, stdout's
    terminal, else 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter without its ``import shutil``: argparse makes a formatter for every argument added,
    and shutil brings bz2, lzma and zlib along, 0.65 MB of the relay's resident memory for a terminal width."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         terminal_columns() - 2 if width is None else width)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cri-resmgr", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"cri-resmgr {__version__}")
    parser.add_argument("--list-policies", action="store_true",
                        help="print the names of the available policies and exit")
    sockets = parser.add_argument_group("sockets")
    sockets.add_argument("--relay-socket", default=DEFAULT_RELAY_SOCKET,
                         help=f"unix socket kubelet connects to (default: {DEFAULT_RELAY_SOCKET}); "
                              "a stale socket is removed, the new one gets mode 0660")
    sockets.add_argument("--runtime-socket", default=DEFAULT_RUNTIME_SOCKET,
                         help=f"CRI runtime service socket to relay to (default: {DEFAULT_RUNTIME_SOCKET}); "
                              "the relay waits, with backoff, until it answers")
    sockets.add_argument("--image-socket", default=None,
                         help="CRI image service socket (default: the runtime socket)")
    sockets.add_argument("--config-socket", default=DEFAULT_CONFIG_SOCKET,
                         help=f"unix socket of the Config API the agent pushes configs and Adjustments to "
                              f"(default: {DEFAULT_CONFIG_SOCKET})")
    sockets.add_argument("--agent-socket", default=DEFAULT_AGENT_SOCKET,
                         help=f"unix socket of cri-resmgr-agent's API, used for node operations "
                              f"(default: {DEFAULT_AGENT_SOCKET})")
    sockets.add_argument("--frontend", choices=FRONTENDS, default="relay",
                         help="how cri-resmgr sees the containers: 'relay' (default) serves --relay-socket for "
                              "kubelet and relays CRI to --runtime-socket; 'nri' registers with containerd as an "
                              "NRI plugin on --nri-socket instead (containerd 2 has NRI on by default) and "
                              "serves no relay socket: kubelet stays on containerd's socket")
    sockets.add_argument("--nri", dest="frontend", action="store_const", const="nri",
                         help="short for --frontend nri")
    sockets.add_argument("--nri-socket", default=DEFAULT_NRI_SOCKET,
                         help=f"containerd's NRI socket, with --frontend nri (default: {DEFAULT_NRI_SOCKET}); "
                              "cri-resmgr connects again, with backoff, whenever it goes away")
    sockets.add_argument("--nri-plugin-name", default="cri-resmgr", metavar="NAME",
                         help="the name cri-resmgr registers as an NRI plugin (default: cri-resmgr)")
    sockets.add_argument("--nri-plugin-index", default="90", metavar="NN",
                         type=_plugin_index,
                         help="NRI plugin index, two digits; plugins are called in ascending order (default: 90)")
    sockets.add_argument("--disable-agent", action="store_true",
                         help="take no configuration from the agent: do not serve the Config API")
    state = parser.add_argument_group("state and config")
    state.add_argument("--relay-dir", default=DEFAULT_RELAY_DIR,
                       help=f"directory for the relay's persistent state (default: {DEFAULT_RELAY_DIR}); "
                            "created at startup")
    state.add_argument("--pid-file", default=DEFAULT_PID_FILE,
                       help=f"pid file written once serving (default: {DEFAULT_PID_FILE}); '' for none")
    state.add_argument("--fallback-config", metavar="FILE",
                       help="config used when no other configuration is available (YAML, "
                            "cri-resource-manager format)")
    state.add_argument("--force-config", metavar="FILE",
                       help="config that overrides any other configuration; re-read on SIGHUP")
    state.add_argument("--force-config-signal", type=signal_name, default="SIGHUP", metavar="SIGNAL",
                       help="signal that re-reads --force-config (default: SIGHUP), as cri-resource-manager's flag")
    state.add_argument("--reset-config", action="store_true",
                       help="clear the config cached from the agent in --relay-dir and exit "
                            "(cri-resmgr must be stopped)")
    state.add_argument("--reset-policy", action="store_true",
                       help="clear the active policy and its allocations from the cache in --relay-dir and "
                            "exit (cri-resmgr must be stopped)")
    state.add_argument("--disable-policy-switch", action="store_true",
                       help="keep the policy stored in the cache even if the configuration asks for "
                            "another one at startup (switching at runtime is always refused)")
    state.add_argument("--sysfs-root", default="/", metavar="DIR",
                       help="root under which sys/devices/system is read for the CPU/NUMA topology "
                            "(default: /)")
    runtime = parser.add_argument_group("runtime behaviour")
    runtime.add_argument("--metrics-address", default=None,
                         help="HTTP address for Prometheus /metrics, [HOST]:PORT (default: "
                              "instrumentation.HTTPEndpoint from the config, else :8891); 'off' disables")
    runtime.add_argument("--metrics-allow", action="append", default=[], metavar="CIDR[,CIDR...]",
                         help="networks whose peers may also read /metrics (repeatable); loopback and "
                              "the node's own address always may, everyone else gets 403")
    runtime.add_argument("--metrics-socket", default="", metavar="PATH",
                         help="also serve /metrics on this unix socket (mode 0660): for a forwarder that "
                              "can be restricted by a NetworkPolicy (default: none)")
    runtime.add_argument("--runtime-wait-timeout", type=_seconds, default=None, metavar="SECONDS",
                         help="give up if the runtime does not answer in time (default: wait forever)")
    runtime.add_argument("--resync-period", type=_seconds, default=30.0, metavar="SECONDS",
                         help="how often the runtime's containers are compared with the resource manager's; a "
                              "difference seen twice in a row (kubelet bypassed the relay) triggers a resync "
                              "(default: 30; 0 turns the check off)")
    runtime.add_argument("--shutdown-grace", type=_seconds, default=5.0, metavar="SECONDS",
                         help="on SIGTERM, how long in-flight calls may take to finish (default: 5); a shutdown "
                              f"still not done {SHUTDOWN_MARGIN_S:.0f} s after that prints every thread's stack "
                              "and exits with status 1")
    runtime.add_argument("--transport", choices=TRANSPORTS, default="auto",
                         help="how calls are relayed: 'splice' copies HTTP/2 frames between kubelet and the "
                              "runtime and reads along (lowest overhead); 'grpc' terminates each call in a gRPC "
                              "server and re-issues it (needed when --image-socket differs); 'auto' (default) "
                              "picks splice unless the image socket differs")
    runtime.add_argument("--workers", type=_positive_int, default=32,
                         help="maximum concurrently served calls with --transport grpc (default: 32)")
    runtime.add_argument("--rebalance-interval", type=_duration, default=10.0, metavar="DURATION",
                         help="how often the containers' CPU usage is read from their cgroups for a policy that "
                              "sizes pools by it (dynamic-pools); seconds or a Go duration like 30s "
                              "(default: 10; 0 turns it off: pools then follow requests only)")
    add_logging_arguments(parser)
    return parser


def add_logging_arguments(parser: argparse.ArgumentParser, *, default_format: str = "text") -> None:
    """The logging flags every program shares."""
    group = parser.add_argument_group("logging")
    group.add_argument("--log-format", choices=LOG_FORMATS, default=default_format,
                       help=f"log line format on stderr (default: {default_format}); json writes one object "
                            "per line with ts, level, logger, msg and context keys")
    group.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                       help="minimum level logged by all modules (default: info)")
    group.add_argument("--debug", action="append", default=[], metavar="MODULES",
                       help="comma-separated modules to log at debug level regardless of --log-level, "
                            "e.g. 'relay,dump'; '*' for all; may be repeated")
