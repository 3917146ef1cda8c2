"""Kubelet layouts: parsing units and env files, effective endpoint, and repoint plans (on a tmp root)."""

from __future__ import annotations

from pathlib import Path

import pytest
from integration.installer.installer_node import LAYOUTS

from installer.host import CommandRunner, Host
from installer.kubelet_endpoint import (
    KubeletLayoutError,
    effective_endpoint,
    kubelet_unit_from_files,
    parse_env_file,
    parse_unit_text,
    plan_repoint,
    set_config_endpoint,
    set_env_var_tokens,
)

RELAY = "unix:///var/run/cri-resmgr/cri-resmgr.sock"
CONTAINERD = "unix:///run/containerd/containerd.sock"
UNIT_FILES = {
    "gardener": ["/etc/systemd/system/kubelet.service"],
    "kubeadm": ["/lib/systemd/system/kubelet.service", "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"],
    "config": ["/etc/systemd/system/kubelet.service"],
}


def make_host(tmp_path: Path, files: dict[str, str]) -> Host:
    for path, content in files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc/environment").write_text("")
    return Host(tmp_path, CommandRunner())


def same(a: str, b: str) -> bool:
    return a == b


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_layout_is_repointed_and_only_its_endpoint_line_changes(tmp_path: Path, layout: str) -> None:
    host = make_host(tmp_path, LAYOUTS[layout].files)
    unit = kubelet_unit_from_files(host, UNIT_FILES[layout])
    assert effective_endpoint(unit, host.read_if_exists)[0] == CONTAINERD
    plan = plan_repoint(host, unit, RELAY, same)
    assert plan.layout == layout
    assert plan.previous_endpoint == CONTAINERD
    for path, new in plan.files.items():
        old = host.read_if_exists(path) or b""
        (tmp_path / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path.lstrip("/")).write_bytes(new)
        # Only lines mentioning the endpoint differ.
        removed = set(old.decode().splitlines()) - set(new.decode().splitlines())
        added = set(new.decode().splitlines()) - set(old.decode().splitlines())
        assert all("untime" in line for line in removed | added), (removed, added)
    assert effective_endpoint(unit, host.read_if_exists)[0] == RELAY
    # Planning again on the repointed files changes nothing: install is idempotent.
    again = plan_repoint(host, unit, RELAY, same)
    assert all(host.read_if_exists(p) == data for p, data in again.files.items())


def test_gardener_layout_uses_extra_args_which_outlives_a_unit_rewrite(tmp_path: Path) -> None:
    host = make_host(tmp_path, LAYOUTS["gardener"].files)
    unit = kubelet_unit_from_files(host, UNIT_FILES["gardener"])
    plan = plan_repoint(host, unit, RELAY, same)
    assert list(plan.files) == ["/var/lib/kubelet/extra_args"]
    assert plan.files["/var/lib/kubelet/extra_args"] == (
        b'KUBELET_EXTRA_ARGS="--container-runtime-endpoint=' + RELAY.encode() + b'"\n')


def test_flag_in_unit_after_extra_args_cannot_be_overridden_and_nothing_is_planned(tmp_path: Path) -> None:
    files = dict(LAYOUTS["gardener"].files)
    files["/etc/systemd/system/kubelet.service"] = files["/etc/systemd/system/kubelet.service"].replace(
        "--v=2 $KUBELET_EXTRA_ARGS", f"$KUBELET_EXTRA_ARGS --container-runtime-endpoint={CONTAINERD}")
    host = make_host(tmp_path, files)
    unit = kubelet_unit_from_files(host, UNIT_FILES["gardener"])
    with pytest.raises(KubeletLayoutError, match="cannot repoint kubelet.*gardener \\(would give"):
        plan_repoint(host, unit, RELAY, same)


def test_unknown_layout_is_a_clear_error(tmp_path: Path) -> None:
    host = make_host(tmp_path, {"/etc/systemd/system/kubelet.service":
                                f"[Service]\nExecStart=/usr/bin/kubelet --container-runtime-endpoint={CONTAINERD}\n"})
    unit = kubelet_unit_from_files(host, ["/etc/systemd/system/kubelet.service"])
    with pytest.raises(KubeletLayoutError, match="no supported layout found"):
        plan_repoint(host, unit, RELAY, same)


def test_unit_parsing_joins_continuations_skips_comments_and_resets_execstart() -> None:
    entries = parse_unit_text("[Service]\nExecStart=/a \\\n  # comment\n  --x=1 \\\n  --y\n; c\nExecStart=\n")
    assert entries == [("Service", "ExecStart", "/a  --x=1  --y"), ("Service", "ExecStart", "")]


def test_env_file_parsing_and_single_line_edit_keep_other_bytes() -> None:
    text = '# keep me\nOTHER=1\nKUBELET_EXTRA_ARGS="--a=1 --container-runtime-endpoint x --b"\nTAIL=z'
    assert parse_env_file(text)["KUBELET_EXTRA_ARGS"] == "--a=1 --container-runtime-endpoint x --b"
    new = set_env_var_tokens(text, "KUBELET_EXTRA_ARGS", lambda w: [t for t in w if t != "--b"] + ["--c"])
    assert new == '# keep me\nOTHER=1\nKUBELET_EXTRA_ARGS="--a=1 --container-runtime-endpoint x --c"\nTAIL=z'
    assert set_env_var_tokens("A=1", "B", lambda w: ["--z"]) == 'A=1\nB="--z"\n'


def test_config_edit_rejects_what_a_line_edit_cannot_change() -> None:
    assert set_config_endpoint("a: 1\ncontainerRuntimeEndpoint: x\n", "y") == "a: 1\ncontainerRuntimeEndpoint: y\n"
    assert set_config_endpoint("a: 1", "y") == "a: 1\ncontainerRuntimeEndpoint: y\n"
    with pytest.raises(KubeletLayoutError, match="line edit"):
        set_config_endpoint('{"a": 1, "containerRuntimeEndpoint": "x"}', "y")
