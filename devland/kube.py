"""kubectl against one cluster: the landscape's seed, shoot and garden, and a real Gardener's garden or shoot
(shoot_ops.py)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass


@dataclass
class Kube:
    """kubectl against one cluster (the garden, or a shoot)."""

    kubectl_path: str
    kubeconfig: str

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run([self.kubectl_path, "--kubeconfig", self.kubeconfig, *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def get_json(self, *args: str) -> dict:
        return json.loads(self.run("get", *args, "-o", "json").stdout)
