"""systemctl on the node, through the host command runner."""

from __future__ import annotations

import logging
import time

from installer.host import Host, HostCommandError

log = logging.getLogger("installer.systemd")


def show(host: Host, unit: str, *props: str) -> dict[str, str]:
    out = host.run(["systemctl", "show", unit, "--no-pager", *(f"--property={p}" for p in props)]).stdout
    values: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        values[key] = value
    return values


def daemon_reload(host: Host) -> None:
    host.run(["systemctl", "daemon-reload"])
    log.info("systemd daemon-reload", extra={"change": "daemon-reload"})


def is_active(host: Host, unit: str) -> str:
    """ActiveState of the unit: active, activating, failed, inactive, ..."""
    return show(host, unit, "ActiveState")["ActiveState"]


def unit_exists(host: Host, unit: str) -> bool:
    return show(host, unit, "LoadState")["LoadState"] not in ("not-found", "")


def enable(host: Host, unit: str) -> None:
    host.run(["systemctl", "enable", unit])
    log.info("enabled %s", unit, extra={"unit": unit, "change": "enable"})


def disable(host: Host, unit: str) -> None:
    host.run(["systemctl", "disable", unit])
    log.info("disabled %s", unit, extra={"unit": unit, "change": "disable"})


def restart(host: Host, unit: str) -> None:
    host.run(["systemctl", "restart", unit], timeout=120)
    log.info("restarted %s", unit, extra={"unit": unit, "change": "restart"})


def stop(host: Host, unit: str) -> None:
    host.run(["systemctl", "stop", unit], timeout=120)
    log.info("stopped %s", unit, extra={"unit": unit, "change": "stop"})


def reset_failed(host: Host, unit: str) -> None:
    host.run(["systemctl", "reset-failed", unit], check=False)


def main_pid(host: Host, unit: str) -> int:
    return int(show(host, unit, "MainPID")["MainPID"] or 0)


def process_argv(host: Host, pid: int) -> list[str]:
    """Command line of a node process, read in the node's own /proc (its pid namespace)."""
    try:
        raw = host.run(["cat", f"/proc/{pid}/cmdline"]).stdout
    except HostCommandError:
        return []
    return [a for a in raw.split("\0") if a] if raw else []


def wait_running(host: Host, unit: str, timeout: float, settle: float = 1.0) -> tuple[int, str]:
    """Wait until the unit is active with a main process that stays the same for ``settle`` seconds.

    Returns (main pid, state). Catches a service that starts and immediately dies: systemd
    reports ``active`` for a Type=simple service as soon as it forked.
    """
    deadline = time.monotonic() + timeout
    state = ""
    while True:
        props = show(host, unit, "ActiveState", "MainPID", "NRestarts")
        state = props["ActiveState"]
        pid = int(props.get("MainPID") or 0)
        if state == "active" and pid:
            time.sleep(settle)
            again = show(host, unit, "ActiveState", "MainPID", "NRestarts")
            if again["ActiveState"] == "active" and again["MainPID"] == str(pid) and \
                    again["NRestarts"] == props["NRestarts"]:
                return pid, state
        if time.monotonic() >= deadline:
            return 0, state
        time.sleep(0.2)
