#!/usr/bin/env python3
"""The local demo (`make demo`): cri-resmgr enabled and disabled on a local landscape in which
every component but gardenlet is the real one (see hacks/landscape.py and the README).

  0. the landscape: seed + shoot kube-apiserver, kube-controller-manager, kube-scheduler,
     kube-proxy, gardener-resource-manager, nspawn nodes with real kubelets (a seed node running
     the extension's Deployment from its image, two shoot nodes in two worker pools);
  1. enable: the gardenlet stand-in writes the Cluster and the Extension (operation=reconcile),
     the extension renders the ManagedResource, gardener-resource-manager applies it to the shoot;
  2. the installer and agent DaemonSets roll out through kubelet;
  3. each installer pod repoints its node's real kubelet at the relay;
  4. a Guaranteed pod created through the shoot API gets a CPU of its own (the static policy): its
     cpuset.cpus, read from the host cgroup, shares no CPU with any other container on the node;
  5. a changed `default` config (the shoot's providerConfig) switches the node's policy live, to
     topology-aware with PinCPU: false: a new Guaranteed pod is no longer pinned;
  6. disable: the gardenlet stand-in deletes the Extension;
  7. the uninstall roll runs;
  8. every node's files are back byte for byte, kubelet is back on containerd, and the workload
     pods are still Running.

With --mode nri, cri-resmgr runs as containerd 2's NRI plugin instead (providerConfig ``mode: nri``): step 2 rolls
out the NRI installer and the plugin's DaemonSet, step 3 checks that kubelet stays on containerd (nothing is
repointed) while the agent delivers the config to the plugin, and steps 4, 5 and 8 are the same checks: the cpusets
come from the plugin's adjustments and updates through containerd. Three steps more show what NRI mode is for:
  4a. the shoot switched to the relay live (``mode: relay``), no drain: the NRI DaemonSets go, kubelet is repointed,
      and the pinned pod keeps its container and its exclusive CPU;
  4b. and back to NRI the same way;
  4c. the plugin killed (SIGKILL) while pods start on its node: every pod starts, and the plugin comes back.

It prints a summary table and stops everything it started (unless --keep).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for devland/: a script runs with only hacks/ on its path

from devland.demo import NRI, RELAY, Demo  # noqa: E402
from devland.tools import SETUP_HINT  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="leave the landscape running for kubectl")
    parser.add_argument("--images-dir", type=Path, default=REPO / "_out" / "images",
                        help="make build-images output (default %(default)s)")
    parser.add_argument("--mode", choices=(RELAY, NRI), default=RELAY,
                        help="where cri-resmgr sits on the nodes: the CRI relay (default) or containerd's NRI plugin "
                             "(providerConfig mode; docs/usage/configuration.md)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("demo: must run as root (network namespace, systemd-nspawn, cgroups)", file=sys.stderr)
        return 2
    try:
        demo = Demo(Path(tempfile.mkdtemp(prefix="cri-resmgr-demo-", dir="/tmp")), args.keep, args.images_dir,
                    args.mode)
    except RuntimeError as exc:
        print(f"demo: {exc}; {SETUP_HINT}", file=sys.stderr)
        return 2
    return demo.run()


if __name__ == "__main__":
    sys.exit(main())
