"""providerConfig mode/modes as the internal chart's values (extension/installation.py): which installer runs on
which worker pools, where the NRI plugin runs, and that an all-relay shoot keeps its rollout digest."""

from __future__ import annotations

import pytest

from extension import node_proof
from extension.installation import FRONTEND_LABEL, INSTALL, UNINSTALL, InstallationValues, pool_constraint

IMAGES = {"installer": "reg/i:v1", "agent": "reg/a:v1"}


def values(frontend: str = "relay", pools: dict[str, str] | None = None, mode: str = INSTALL,
           **kw: object) -> InstallationValues:
    return InstallationValues(images=IMAGES, mode=mode, frontend=frontend, pool_frontends=pools or {}, **kw)


def by_name(v: InstallationValues) -> dict[str, tuple[str, str, list[str]]]:
    return {i["name"]: (i["mode"], i["poolOperator"], i["pools"]) for i in v.installers()}


def test_an_all_relay_shoot_renders_as_before():
    v = values()
    assert by_name(v) == {"cri-resmgr-installer": ("install", "", [])}
    assert v.nri_plugin() == {"enabled": False}
    # The digest names what the installer applies: unchanged, so upgrading the extension rolls no node.
    before = {"image": "reg/i:v1", "mode": "install", "static": {}, "nodeSelector": {}, "workerPools": [],
              "metrics": {"port": 8891, "allow": []}}
    assert v.installer_inputs() == before
    assert values(pools={"a": "relay"}).installer_inputs() == before


def test_per_pool_modes_split_the_nodes_between_the_installers():
    v = values("relay", {"cpu": "nri", "db": "auto", "web": "relay"})
    assert by_name(v) == {"cri-resmgr-installer": ("install", "NotIn", ["cpu", "db"]),
                          "cri-resmgr-installer-nri": ("nri", "In", ["cpu"]),
                          "cri-resmgr-installer-auto": ("auto", "In", ["db"])}
    plugin = v.nri_plugin()
    assert (plugin["enabled"], plugin["poolOperator"], plugin["pools"]) == (True, "In", ["cpu", "db"])
    assert plugin["frontendLabel"] == FRONTEND_LABEL
    assert "frontend" in v.installer_inputs()  # a mode change is a rollout of the installers


def test_a_shoot_in_nri_mode_keeps_the_relay_only_where_a_pool_asks_for_it():
    v = values("nri", {"legacy": "relay"})
    assert by_name(v) == {"cri-resmgr-installer": ("install", "In", ["legacy"]),
                          "cri-resmgr-installer-nri": ("nri", "NotIn", ["legacy"])}
    assert (v.nri_plugin()["poolOperator"], v.nri_plugin()["pools"]) == ("NotIn", ["legacy"])
    assert by_name(values("nri")) == {"cri-resmgr-installer-nri": ("nri", "", [])}
    assert by_name(values("auto")) == {"cri-resmgr-installer-auto": ("auto", "", [])}


def test_uninstall_is_one_installer_everywhere_and_no_plugin():
    v = values("nri", {"legacy": "relay"}, mode=UNINSTALL)
    assert by_name(v) == {"cri-resmgr-installer": ("uninstall", "", [])}
    assert v.nri_plugin() == {"enabled": False}


@pytest.mark.parametrize("default, pools", [("relay", {"a": "nri", "b": "auto", "c": "relay"}),
                                            ("nri", {"a": "relay", "b": "auto"}), ("auto", {"a": "nri"})])
def test_every_pool_gets_exactly_one_installer(default, pools):
    names = [*pools, "unlisted"]
    for pool in names:
        mine = []
        for wanted in ("relay", "nri", "auto"):
            c = pool_constraint(default, pools, {wanted})
            if c is not None and (c[0] == "" or (pool in c[1]) == (c[0] == "In")):
                mine.append(wanted)
        assert mine == [pools.get(pool, default)], pool


def test_extra_options_become_the_plugins_arguments():
    v = values("nri", static_configs={"EXTRA_OPTIONS": "--log-level=debug --log-format json"},
               metrics_allow=("10.0.0.0/8",))
    assert v.nri_plugin()["extraArgs"] == ["--log-level=debug", "--log-format", "json",
                                           "--metrics-allow=10.0.0.0/8"]
    assert values("nri").chart_values()["nriPlugin"]["extraArgs"] == []


def test_the_label_the_installer_sets_is_the_one_the_plugin_selects():
    from installer import node_label

    assert node_label.FRONTEND_LABEL == FRONTEND_LABEL
    assert node_proof.rollout_digest(values().installer_inputs()) != node_proof.rollout_digest(
        values("nri").installer_inputs())


def test_nri_and_auto_need_kubernetes_1_30():
    from extension.errors import ConfigurationError
    from extension.provider_config import parse_provider_config
    from extension.shoot_config import check_mode_supported

    check_mode_supported(parse_provider_config({"mode": "nri"}), "1.30.2")
    check_mode_supported(parse_provider_config(None), "1.28.0")  # the relay everywhere: as before
    with pytest.raises(ConfigurationError) as err:
        check_mode_supported(parse_provider_config({"modes": {"a": "auto"}}), "1.29.9")
    assert err.value.field == "providerConfig.modes" and "needs Kubernetes 1.30 or later" in str(err.value)
