#!/usr/bin/env python3
"""The local landscape on this machine: real seed and shoot API servers, kube-controller-manager,
kube-scheduler, kube-proxy, gardener-resource-manager, nspawn nodes with real kubelets, and the
extension running as its chart's Deployment on a seed node. Only gardenlet's part is played (by a
stand-in driver the demo and the e2e tests use).

  hacks/landscape.py up           start it, print how to reach it, stop it on Ctrl-C
  hacks/landscape.py up --keep    start it and leave it running (stop it with `down`)
  hacks/landscape.py env          print the kubeconfigs and the network namespace of a kept landscape
  hacks/landscape.py down         stop a kept landscape and check that nothing is left

Everything runs in its own network namespace: reach the API servers with
  ip netns exec <netns> kubectl --kubeconfig <dir>/shoot.kubeconfig get nodes
Needs root and `make setup build-images`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for devland/: a script runs with only hacks/ on its path

from devland import Images, Landscape, log, teardown  # noqa: E402
from devland.landscape import STATE_FILE  # noqa: E402
from devland.tools import find_tools  # noqa: E402

DEFAULT_DIR = Path(os.environ.get("LANDSCAPE_DIR", "/tmp/cri-resmgr-landscape"))


def print_env(state: dict) -> None:
    ns, d = state["netns"], state["workdir"]
    print(f"# network namespace: {ns} (every address below exists only inside it)")
    print(f"export SEED_KUBECONFIG={state['seed_kubeconfig']}")
    print(f"export SHOOT_KUBECONFIG={state['shoot_kubeconfig']}")
    print(f"# e.g.: ip netns exec {ns} {state['kubectl']} --kubeconfig $SHOOT_KUBECONFIG get nodes -o wide")
    print(f"#       ip netns exec {ns} {state['kubectl']} --kubeconfig $SEED_KUBECONFIG "
          f"-n {state.get('namespace', '')} get extension,managedresource")
    print(f"# logs: {d}/logs")


def cmd_up(args: argparse.Namespace) -> int:
    workdir = args.dir
    if (workdir / STATE_FILE).exists():
        print(f"a landscape state exists in {workdir}; run `{sys.argv[0]} down` first", file=sys.stderr)
        return 1
    tools = find_tools()
    land = Landscape(tools, workdir, Images.from_dir(tools, args.images_dir))
    land.up()
    state = land.state() | {"namespace": land.namespace}
    (workdir / STATE_FILE).write_text(json.dumps(state, indent=2))
    print_env(state)
    if args.keep:
        log(f"kept running; stop it with: {sys.argv[0]} down --dir {workdir}")
        return 0
    log("running; Ctrl-C stops it")
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except KeyboardInterrupt:
        pass
    return 1 if land.down() else 0


def load_state(workdir: Path) -> dict:
    path = workdir / STATE_FILE
    if not path.exists():
        raise SystemExit(f"no landscape state in {workdir} (nothing kept running there)")
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help="state, kubeconfigs and logs (default %(default)s)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the landscape")
    up.add_argument("--keep", action="store_true", help="leave it running and exit")
    up.add_argument("--images-dir", type=Path, default=REPO / "_out" / "images",
                    help="make build-images output (default %(default)s)")
    sub.add_parser("env", help="print kubeconfigs and network namespace of a kept landscape")
    sub.add_parser("down", help="stop a kept landscape")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("must run as root (network namespaces, systemd-nspawn, cgroups)")
    if args.cmd == "up":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if not args.keep else None
        return cmd_up(args)
    state = load_state(args.dir)
    if args.cmd == "env":
        print_env(state)
        return 0
    return 1 if teardown(state) else 0


if __name__ == "__main__":
    sys.exit(main())
