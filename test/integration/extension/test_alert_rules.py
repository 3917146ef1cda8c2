"""Every shipped alert, evaluated by Prometheus's own rule engine (``promtool test rules``, Debian's prometheus
package, installed by hacks/setup-tools.sh): each fires on the series it is about and stays silent on series
that must not trigger it. Our series are taken from a real RelayMetrics exposition (names and label sets as the
relay writes them) plus the target labels the ScrapeConfig attaches; the installer's from kube-state-metrics'
``kube_pod_status_ready`` as the shoot's kube-state-metrics exports it."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from extension import alerts
from extension.monitoring import JOB_NAME, objects, scrape_config
from resmgr.config.files import FALLBACK, FORCE
from resmgr.configplane.plane import AGENT_SOURCE
from resmgr.relay.metrics import RelayMetrics

pytestmark = pytest.mark.integration

NODE, POD = "worker-1", "cri-resmgr-agent-x7k2p"
# What the ScrapeConfig's relabelings attach to every series of a node's target (checked below).
TARGET = {"job": JOB_NAME, "type": "shoot", "node": NODE, "pod": POD, "instance": "kube-apiserver:443"}
KSM = {"job": "kube-state-metrics", "instance": "kube-state-metrics", "type": "shoot"}
INSTALLER_POD = "cri-resmgr-installer-5xq9z"


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.fail("promtool is missing: it comes with Debian's prometheus package (hacks/setup-tools.sh apt step, "
                    "or apt-get install prometheus)")
    return found


def _selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def relay_series(act: Callable[[RelayMetrics], None], **target: str) -> str:
    """The one sample ``act`` makes a fresh relay expose, as the shoot Prometheus stores it."""
    metrics = RelayMetrics()
    act(metrics)
    samples = [(s.name, s.labels) for family in text_string_to_metric_families(metrics.registry.exposition().decode())
               for s in family.samples if s.value]
    [(name, labels)] = [(n, lab) for n, lab in samples if not n.endswith(("_bucket", "_count", "_sum"))]
    return _selector(name, {**labels, **TARGET, **target})


def up(**target: str) -> str:
    return _selector("up", {**TARGET, **target})


def installer_ready(pod: str, condition: str) -> str:
    # kube-state-metrics' kube_pod_status_ready: one series per condition (true, false, unknown), 1 on the one
    # that holds.
    return _selector("kube_pod_status_ready", {**KSM, "namespace": "kube-system", "pod": pod, "uid": "8c1f0d2e",
                                               "condition": condition})


def listing(method: str) -> Callable[[RelayMetrics], None]:
    return lambda m: m.observe(method, "OK", 0.001)


def drift(containers: int) -> Callable[[RelayMetrics], None]:
    return lambda m: m.watch_placements(lambda: [], lambda: float(containers))


def drift_annotations(value: int) -> dict[str, str]:
    """CriResmgrPlacementDrift's annotations with ``$value`` filled in (``expected`` fills only ``$labels``)."""
    annotations = expected("CriResmgrPlacementDrift", node=NODE)["exp_annotations"]
    return {k: v.replace("{{ $value }}", str(value)) for k, v in annotations.items()}


def expected(name: str, **labels: str) -> dict[str, Any]:
    """The alert as promtool reports it: the rule's labels and its annotations with $labels filled in."""
    [alert] = [a for a in alerts.ALERTS if a.name == name]
    rule = alert.rule()

    def fill(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)

    return {"exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {k: fill(v) for k, v in rule["annotations"].items()}}


def case(name: str, series: dict[str, str], at: str, fired: list[dict[str, Any]]) -> dict[str, Any]:
    return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [{"alertname": name, "eval_time": at, "exp_alerts": fired}]}


# Per alert: (firing cases, silent cases). Values: promtool's expanding notation, one sample a minute;
# "_" is a missing sample.
CASES: dict[str, list[dict[str, Any]]] = {
    "CriResmgrRelayDown": [
        case("CriResmgrRelayDown", {up(): "1x5 0x20"}, "20m", [expected("CriResmgrRelayDown", **TARGET)]),
        case("CriResmgrRelayDown", {up(): "1x30"}, "20m", []),
        case("CriResmgrRelayDown", {up(): "1x10 0x5"}, "15m", []),  # down for less than 10 minutes
    ],
    "CriResmgrKubeletBypassesRelay": [
        # kubelet went back to containerd at minute 10: its listing counters stop while the relay answers (the
        # supervisor's Version probes still arrive).
        case("CriResmgrKubeletBypassesRelay",
             {up(): "1x60", relay_series(listing("ListContainers")): "0+60x10 600x50",
              relay_series(listing("ListPodSandbox")): "0+60x10 600x50",
              relay_series(listing("Version")): "0+6x60"},
             "45m", [expected("CriResmgrKubeletBypassesRelay", node=NODE)]),
        # a relay that started while kubelet was on containerd never saw a listing call
        case("CriResmgrKubeletBypassesRelay", {up(): "1x30", relay_series(listing("Version")): "0+6x30"},
             "25m", [expected("CriResmgrKubeletBypassesRelay", node=NODE)]),
        case("CriResmgrKubeletBypassesRelay",
             {up(): "1x60", relay_series(listing("ListContainers")): "0+60x60",
              relay_series(listing("Version")): "0+6x60"}, "45m", []),
        # a relay that does not answer is CriResmgrRelayDown's, not this one's
        case("CriResmgrKubeletBypassesRelay", {up(): "0x60"}, "45m", []),
        # NRI mode: kubelet never talks to cri-resmgr; containerd's calls (here one Synchronize) say so
        case("CriResmgrKubeletBypassesRelay", {up(): "1x60", relay_series(listing("nri/Synchronize")): "1x60"},
             "45m", []),
    ],
    "CriResmgrInstallerNotReady": [
        case("CriResmgrInstallerNotReady",
             {installer_ready(INSTALLER_POD, "true"): "1x5 0x30", installer_ready(INSTALLER_POD, "false"): "0x5 1x30"},
             "25m", [expected("CriResmgrInstallerNotReady", **KSM, namespace="kube-system", pod=INSTALLER_POD,
                              uid="8c1f0d2e", condition="true")]),
        case("CriResmgrInstallerNotReady",
             {installer_ready(INSTALLER_POD, "true"): "1x30", installer_ready(INSTALLER_POD, "false"): "0x30",
              # another kube-system pod that is not ready is not ours
              installer_ready("coredns-6d4b75cb6d-2lq8w", "true"): "0x30"},
             "25m", []),
        case("CriResmgrInstallerNotReady", {installer_ready(INSTALLER_POD, "true"): "1x10 0x10"}, "20m", []),
    ],
    "CriResmgrConfigRefused": [
        # refused at startup: the counter appears at 1
        case("CriResmgrConfigRefused", {relay_series(lambda m: m.config_errors.labels(FORCE).inc()): "_x20 1x40"},
             "30m", [expected("CriResmgrConfigRefused", node=NODE, source=FORCE)]),
        # refused on SIGHUP hours after an earlier refusal
        case("CriResmgrConfigRefused", {relay_series(lambda m: m.config_errors.labels(FALLBACK).inc()): "1x180 2x30"},
             "190m", [expected("CriResmgrConfigRefused", node=NODE, source=FALLBACK)]),
        # a ConfigMap the node could not apply, pushed by the agent
        case("CriResmgrConfigRefused",
             {relay_series(lambda m: m.config_errors.labels(AGENT_SOURCE).inc()): "_x30 1x10 2x10"},
             "50m", [expected("CriResmgrConfigRefused", node=NODE, source=AGENT_SOURCE)]),
        # the last refusal is more than an hour old
        case("CriResmgrConfigRefused", {relay_series(lambda m: m.config_errors.labels(FORCE).inc()): "1x180"},
             "150m", []),
    ],
    "CriResmgrPlacementsUnpinned": [
        case("CriResmgrPlacementsUnpinned",
             {relay_series(lambda m: m.policy_error("CreateContainer", "before")): "_x10 1x30"},
             "15m", [expected("CriResmgrPlacementsUnpinned", node=NODE)]),
        case("CriResmgrPlacementsUnpinned",
             {relay_series(lambda m: m.policy_error("CreateContainer", "before")): "1x100 2x10"},
             "105m", [expected("CriResmgrPlacementsUnpinned", node=NODE)]),
        # a resync failure places nothing new; an old CreateContainer failure is past
        case("CriResmgrPlacementsUnpinned",
             {relay_series(lambda m: m.policy_error("resync", "resync")): "_x10 1+1x30",
              relay_series(lambda m: m.policy_error("CreateContainer", "before")): "3x100"},
             "90m", []),
    ],
    "CriResmgrPlacementDrift": [
        case("CriResmgrPlacementDrift", {relay_series(drift(2)): "2x45"}, "40m",
             [expected("CriResmgrPlacementDrift", node=NODE) | {"exp_annotations": drift_annotations(2)}]),
        # drift that a resync corrected within minutes; then none
        case("CriResmgrPlacementDrift", {relay_series(drift(1)): "1x5 0x40"}, "40m", []),
    ],
    "CriResmgrRelayErrors": [
        # containerd unavailable for 10% of the calls
        case("CriResmgrRelayErrors",
             {relay_series(lambda m: m.relay_error("ListContainers", "upstream_unavailable")): "0+6x60",
              relay_series(listing("ListContainers")): "0+60x60"},
             "45m", [expected("CriResmgrRelayErrors", node=NODE)]),
        # one undecodable message in 600
        case("CriResmgrRelayErrors",
             {relay_series(lambda m: m.relay_error("CreateContainer", "undecodable_request")): "0+1x60",
              relay_series(listing("ListContainers")): "0+600x60"},
             "45m", []),
    ],
}


def _write(tmp_path: Path, groups: list[dict[str, Any]]) -> Path:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m",
                                     "tests": [c for cases in CASES.values() for c in cases]}, sort_keys=False))
    return tests


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def shipped_groups() -> list[dict[str, Any]]:
    """The groups exactly as the seed ManagedResource carries them."""
    [rule] = [o for o in objects("shoot--p--s") if o["kind"] == "PrometheusRule"]
    return rule["spec"]["groups"]


def test_target_labels_are_the_scrape_configs():
    relabeled = {r["targetLabel"] for r in scrape_config("shoot--p--s")["spec"]["relabelings"]
                 if "targetLabel" in r and not r["targetLabel"].startswith("__")}
    assert relabeled == set(TARGET) - {"instance"}  # instance: Prometheus's default, __address__


def test_every_alert_has_a_firing_and_a_silent_case():
    assert set(CASES) == {a.name for a in alerts.ALERTS}
    for name, cases in CASES.items():
        outcomes = [bool(t["exp_alerts"]) for c in cases for t in c["alert_rule_test"]]
        assert True in outcomes and False in outcomes, name


def test_promtool_checks_and_tests_the_shipped_rules(tmp_path):
    tests = _write(tmp_path, shipped_groups())
    check = _run("check", "rules", "rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(alerts.ALERTS)} rules found" in check.stdout
    result = _run("test", "rules", tests.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", [a.name for a in alerts.ALERTS])
def test_promtool_tests_fail_when_a_rule_is_broken(tmp_path, name):
    """The cases can fail: with one alert's expression replaced by one that never fires, promtool says so."""
    groups = shipped_groups()
    [rule] = [r for r in groups[0]["rules"] if r["alert"] == name]
    rule["expr"] = "vector(1) == 0"
    result = _run("test", "rules", _write(tmp_path, groups).name, cwd=tmp_path)
    assert result.returncode != 0
    assert f"alertname: {name}" in result.stdout + result.stderr
