"""Entry point of the single-file executable (PyInstaller one-file, see hacks/build-executable.sh).

One binary carries every command; it picks the command from the name it was
invoked under (a symlink or copy named ``cri-resmgr-installer`` runs the
installer) or, failing that, from its first argument
(``cri-resmgr-bundle cri-resmgr-installer --help``).  Each command is imported
lazily so starting the relay does not pay for kopf and the kubernetes client.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

Main = Callable[[], int | None]

# PyInstaller runtime hooks that hacks/cri-resmgr.spec takes out of the start of every command and bundles
# under DEFERRED_RTHOOKS_DIR instead, in the order PyInstaller ran them. They patch inspect, pkgutil and
# multiprocessing for frozen programs and import them (with zipfile and subprocess) to do so: about 0.7 MB of
# the relay's resident memory, which uses none of the three. Every other command runs them before it starts.
DEFERRED_RTHOOKS = ("pyi_rth_inspect", "pyi_rth_multiprocessing", "pyi_rth_pkgutil")
DEFERRED_RTHOOKS_DIR = "_deferred_rthooks"
WITHOUT_RTHOOKS = frozenset({"cri-resmgr"})


# Explicit imports inside functions: PyInstaller's analysis sees them, Python runs only the one needed.
def _resmgr() -> Main:
    from resmgr.launch import main
    return main


def _agent() -> Main:
    from resmgr.agent.cli import main
    return main


def _agent_probe() -> Main:
    from resmgr.agent.probe import main
    return main


def _installer_probe() -> Main:
    from installer.probe import main
    return main


def _webhook() -> Main:
    from resmgr.webhook.cli import main
    return main


def _admission() -> Main:
    from admission.cli import main
    return main


def _installer() -> Main:
    from installer.cli import main
    return main


def _extension() -> Main:
    from extension.cli import main
    return main


COMMANDS: dict[str, Callable[[], Main]] = {
    "cri-resmgr": _resmgr,
    "cri-resmgr-agent": _agent,
    "cri-resmgr-agent-probe": _agent_probe,
    "cri-resmgr-installer": _installer,
    "cri-resmgr-installer-probe": _installer_probe,
    "cri-resmgr-webhook": _webhook,
    "gardener-extension-cri-resmgr": _extension,
    "gardener-extension-admission-cri-resmgr": _admission,
}

USAGE = """usage: {prog} COMMAND [ARGS...]   (or invoke this file under a command's name)

One executable for all cri-resmgr commands. Commands:
  {commands}
Run `{prog} COMMAND --help` for a command's options.
"""


def choose(argv: list[str]) -> tuple[str | None, list[str]]:
    """The command to run and the argv it should see (argv[0] becomes the command name)."""
    # No command takes a positional argument named like a command, so the first argument wins
    # (`cri-resmgr cri-resmgr-agent --help` runs the agent).
    if len(argv) > 1 and argv[1] in COMMANDS:
        return argv[1], [argv[1], *argv[2:]]
    name = os.path.basename(argv[0]) if argv else ""
    if name in COMMANDS:
        return name, [name, *argv[1:]]
    return None, argv


def run_deferred_rthooks(bundle: str) -> list[str]:
    """Run the deferred runtime hooks found in ``bundle`` (the unpacked program, sys._MEIPASS) as PyInstaller
    would have at start; returns the names run."""
    ran = []
    for name in DEFERRED_RTHOOKS:
        path = os.path.join(bundle, DEFERRED_RTHOOKS_DIR, name + ".py")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                exec(compile(f.read(), path, "exec"), {"__name__": "__main__", "__file__": path})
            ran.append(name)
    return ran


def main() -> int:
    command, argv = choose(sys.argv)
    bundle = getattr(sys, "_MEIPASS", None)  # PyInstaller's documented attribute: set only in the frozen program
    if bundle is not None and command not in WITHOUT_RTHOOKS:
        run_deferred_rthooks(bundle)
    if command is None:
        prog = os.path.basename(sys.argv[0]) if sys.argv else "cri-resmgr-bundle"
        stream = sys.stdout if sys.argv[1:2] in (["--help"], ["-h"]) else sys.stderr
        print(USAGE.format(prog=prog, commands="\n  ".join(COMMANDS)), file=stream, end="")
        if stream is sys.stderr:
            what = f"unknown command {sys.argv[1]!r}" if len(sys.argv) > 1 else "no command given"
            print(f"{prog}: error: {what}", file=sys.stderr)
            return 2
        return 0
    sys.argv = argv
    rc = COMMANDS[command]()()
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
