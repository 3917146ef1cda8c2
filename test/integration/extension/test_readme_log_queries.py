"""The README's Loki/Vali queries use keys that the components' real JSON log lines have.

Each component is run as its real program: the extension operator reconciling an Extension, the
installer (an uninstall run on an empty host root), the agent, and cri-resmgr with --log-format=json
given a CRI request it cannot decode (one of the lines that name a CRI method).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest
from extension_operator_process import wait_for
from fixtures.seed_api import default_shoot
from integration.relay.relay_process import running_relay

from devland.procs import Process

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[3] / "docs" / "usage" / "metrics-and-logs.md"
BIN = Path(sys.executable).parent
LEVELS = {"debug", "info", "warning", "error", "critical"}
# Which program a query's stream selector means.
SELECTORS = {'container_name="gardener-extension-cri-resmgr"': "extension", 'container_name="installer"': "installer",
             'container_name="agent"': "agent", 'unit="cri-resource-manager.service"': "cri-resmgr"}
_FILTER = re.compile(r'\|\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_FORMAT_KEY = re.compile(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def readme_queries() -> dict[str, list[str]]:
    """The logql lines of the docs' Loki/Vali section (docs/usage/metrics-and-logs.md), by component."""
    text = README.read_text()
    section = text[text.index("## Logs in Grafana (Loki/Vali)"):]
    end = section.find("\n## ", 1)  # the section may be the file's last
    section = section[:end if end != -1 else len(section)]
    block = section[section.index("```logql") + len("```logql"):]
    block = block[:block.index("```")]
    queries: dict[str, list[str]] = {}
    for line in block.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        [component] = [c for sel, c in SELECTORS.items() if sel in line.split("}", 1)[0]]
        queries.setdefault(component, []).append(line)
    return queries


def keys_and_levels(query: str) -> tuple[set[str], set[str]]:
    """JSON keys a query filters on or formats, and the level values it filters for."""
    pipeline = query.split("}", 1)[1]
    assert "| json" in pipeline, f"query does not parse JSON: {query}"
    keys, levels = set(_FORMAT_KEY.findall(pipeline)), set()
    for key, _op, value in _FILTER.findall(pipeline):
        keys.add(key)
        if key == "level":
            levels |= set(value.split("|"))
    return keys, levels


def json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def extension_lines(seed, operator) -> list[dict]:
    ns = seed.new_namespace(operator.prefix)
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns))
    seed.create_extension(ns)
    wait_for(lambda: any(e.get("namespace") == ns for e in operator.log_lines()), "a log line about the shoot",
             operator=operator)
    return [e for e in operator.log_lines() if "raw" not in e]


def installer_lines(tmp: Path) -> list[dict]:
    host = tmp / "host"
    host.mkdir()
    r = subprocess.run([str(BIN / "cri-resmgr-installer"), "--mode", "uninstall", "--once", "--host-root", str(host),
                        "--host-exec", "chroot", "--config-dir", str(tmp / "cfg"), "--ready-file", str(tmp / "ready"),
                        "--log-format", "json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json_lines(r.stderr + r.stdout)


def agent_lines(seed_api, tmp: Path) -> list[dict]:
    proc = Process("cri-resmgr-agent", [str(BIN / "cri-resmgr-agent"), "--kubeconfig", seed_api.kubeconfig,
                                        "--config-socket", str(tmp / "none.sock"), "--agent-socket",
                                        str(tmp / "agent.sock"), "--log-format", "json"],
                   tmp, env={**os.environ, "NODE_NAME": "worker-logs"})
    try:
        proc.wait_until(lambda: "starting cri-resmgr-agent" in proc.log_path.read_text(errors="replace"),
                        "the agent's first line", 60)
    finally:
        proc.stop()
    return json_lines(proc.log_path.read_text(errors="replace"))


def relay_lines(containerd) -> list[dict]:
    with running_relay(containerd, prefix="logq-") as relay:
        with grpc.insecure_channel(relay.endpoint) as channel:
            try:  # not a CreateContainerRequest: the relay logs it and passes it through
                channel.unary_unary("/runtime.v1.RuntimeService/CreateContainer")(b"\x0a\xff\xff\xff\xff\x0f",
                                                                                  timeout=10)
            except grpc.RpcError:
                pass
        wait_for(lambda: any(e.get("method") for e in relay.log_entries()), "the relay's line about the call")
        return [e for e in relay.log_entries() if e.get("level") != "raw"]


def test_readme_log_queries_use_keys_of_real_log_lines(seed, seed_api, operator, containerd):
    queries = readme_queries()
    assert set(queries) == set(SELECTORS.values()), f"a component has no query: {sorted(queries)}"
    with tempfile.TemporaryDirectory(prefix="logq-", dir="/tmp") as d:
        tmp = Path(d)
        (tmp / "installer").mkdir()
        (tmp / "agent").mkdir()
        lines = {"extension": extension_lines(seed, operator), "installer": installer_lines(tmp / "installer"),
                 "agent": agent_lines(seed_api, tmp / "agent"), "cri-resmgr": relay_lines(containerd)}
    for component, qs in queries.items():
        have = set().union(*(e.keys() for e in lines[component]))
        assert {"ts", "level", "logger", "msg"} <= have, (component, sorted(have))
        assert {e["level"] for e in lines[component]} <= LEVELS, component
        for q in qs:
            keys, levels = keys_and_levels(q)
            assert keys <= have, f"{component}: {sorted(keys - have)} in no real log line; query: {q}"
            assert levels <= LEVELS, f"{component}: unknown level in {q}"
