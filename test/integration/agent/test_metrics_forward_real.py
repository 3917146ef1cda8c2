"""cri-resmgr-agent forwards the real relay's /metrics (read from its --metrics-socket) on the pod network,
and says why with a 503 while the relay is down."""

from __future__ import annotations

import http.client

import pytest
from integration.agent.conftest import policy_section, put_config_map, wait_for

from resmgr.agent.reporting import CONFIG_ERROR_ANNOTATION

pytestmark = pytest.mark.integration


def scrape(port: int) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        answer = conn.getresponse()
        return answer.status, answer.getheader("Content-Type", ""), answer.read().decode()
    finally:
        conn.close()


def test_the_agent_serves_the_relays_metrics_and_503_while_the_relay_is_down(plane_node):
    node = plane_node(metrics=True)
    status, content_type, body = scrape(node.metrics_port)
    assert status == 200, body
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE cri_resmgr_requests_total counter" in body

    # Forwarded per scrape, not cached: a pod run through the relay shows up in the agent's answer.
    node.run_container("metrics-probe")
    wait_for(lambda: 'method="RunPodSandbox"' in scrape(node.metrics_port)[2], "RunPodSandbox counted")

    assert node.resmgr is not None
    node.resmgr.stop()  # the relay removes its metrics socket on the way out
    status, _, body = scrape(node.metrics_port)
    assert status == 503
    assert f"cri-resmgr's metrics socket {node.metrics_socket} does not exist" in body
    assert node.agent is not None and node.agent.alive()

    node.start_resmgr()
    status, _, body = wait_for(lambda: (r := scrape(node.metrics_port))[0] == 200 and r, "200 after restart")
    assert "# TYPE cri_resmgr_requests_total counter" in body


def test_a_refused_agent_config_is_counted_for_the_config_refused_alert(plane_node):
    """CriResmgrConfigRefused (extension/alerts.py) sees a ConfigMap the node refused through
    cri_resmgr_config_errors_total{source="agent"}, as the agent forwards it."""
    node = plane_node(metrics=True)
    put_config_map(node.core, "cri-resmgr-config.default", policy_section("1"))
    node.wait_reserved("1")
    assert 'cri_resmgr_config_errors_total{source="agent"}' not in scrape(node.metrics_port)[2]
    # valid to the agent's schema check, so it is pushed; cri-resmgr cannot reserve a CPU the node lacks
    put_config_map(node.core, "cri-resmgr-config.default", policy_section("4095"))
    error = wait_for(lambda: node.annotations().get(CONFIG_ERROR_ANNOTATION), "config-error annotation")
    assert "4095" in error, error
    body = scrape(node.metrics_port)[2]
    assert 'cri_resmgr_config_errors_total{source="agent"} 1.0' in body.splitlines(), body
