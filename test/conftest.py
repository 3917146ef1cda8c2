"""Shared fixtures that start the real components (see test/fixtures/)."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fixtures import hypothesis_profiles, pod_cgroups
from fixtures.containerd import CONTAINERD2, Containerd, running_containerd, runtime_from_env
from fixtures.seed_api import SeedAPI
from fixtures.tiers import tier_of
from fixtures.workers import GroupScheduling

from devland.node import own_cgroup_name, remove_cgroups
from devland.systemd_node import SystemdNode, extract_rootfs
from devland.tools import Tools, find_tools

HYPOTHESIS_PROFILE = hypothesis_profiles.register()


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis profile: {HYPOTHESIS_PROFILE} (CI=true: ci; HYPOTHESIS_PROFILE overrides)"


_SWEPT = pytest.StashKey[list[int | None]]()  # the sweeps' counts, before the run and after it (None: not swept)
_SESSION_LOCK = pytest.StashKey[pod_cgroups.SessionLock]()


def _controls_the_session(config: pytest.Config) -> bool:
    """This process runs the session (not one of xdist's workers), as root, where the pod cgroups are."""
    return not hasattr(config, "workerinput") and os.geteuid() == 0


def pytest_sessionstart(session: pytest.Session) -> None:
    # Empty pod cgroups a killed run left: every landscape kubelet would watch them (fixtures/pod_cgroups.py).
    if _controls_the_session(session.config):
        lock = session.config.stash[_SESSION_LOCK] = pod_cgroups.SessionLock()
        session.config.stash[_SWEPT] = [lock.begin()]


def pytest_sessionfinish(session: pytest.Session) -> None:
    lock = session.config.stash.get(_SESSION_LOCK, None)
    if lock is not None:
        session.config.stash.setdefault(_SWEPT, []).append(lock.end())


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:  # noqa: ANN001 (pytest's type)
    swept = config.stash.get(_SWEPT, [])
    if not swept:
        return
    said = ["not swept (another test session runs)" if n is None else str(n) for n in swept]
    if any(n != "0" for n in said):
        terminalreporter.write_line(f"empty pod cgroups removed under /kubepods: {said[0]} before the run"
                                    + (f", {said[1]} after it" if len(said) > 1 else ""))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(config.rootpath)
    for item in items:
        # `make test-explore` selects property tests by this marker; @given tests get it implicitly.
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)
        relpath = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        tier = tier_of(relpath)
        if tier is not None:
            item.add_marker(tier)


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 (xdist's scheduler type)
    """`make test`'s parallel workers get our units of work: a landscape group, else a test file
    (test/fixtures/workers.py)."""
    return GroupScheduling(config, log)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Undo what a program's setup_logging (called in-process by a test) did to the root logger.

    Left in place, its handler keeps writing to the test's captured stderr after pytest closes
    it, and every later log line in the session becomes a "Logging error" traceback.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: lg.level for name, lg in logging.root.manager.loggerDict.items()
              if isinstance(lg, logging.Logger)}
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    for h in handlers:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(level)
    for name, lg in list(logging.root.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger) and name in levels:
            lg.setLevel(levels[name])


@pytest.fixture(scope="session")
def tools() -> Tools:
    try:
        return find_tools()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def seed_api(tools: Tools) -> Iterator[SeedAPI]:
    workdir = Path(tempfile.mkdtemp(prefix="seed-api-"))
    api = SeedAPI(tools, workdir)
    try:
        api.start()
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="session")
def containerd(tools: Tools) -> Iterator[Containerd]:
    """Debian's containerd 1.6, or containerd 2 with CRI_RESMGR_TEST_CONTAINERD=containerd2."""
    with running_containerd(tools, "ctrd-", runtime=runtime_from_env()) as ctrd:
        yield ctrd


@pytest.fixture(scope="module")
def nri_containerd(tools: Tools) -> Iterator[Containerd]:
    """containerd 2 with NRI on and its NRI socket private (``<workdir>/nri/nri.sock``), for a module's tests
    that register cri-resmgr as its NRI plugin; per module, as a test may restart it."""
    with running_containerd(tools, "ctrd-nri-", runtime=CONTAINERD2, nri=True) as ctrd:
        yield ctrd


@pytest.fixture(scope="session")
def node_rootfs(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not tools.rootfs_tar.exists():
        pytest.fail(f"missing {tools.rootfs_tar}; run `make setup` (bash hacks/setup-tools.sh) first", pytrace=False)
    return extract_rootfs(tools.rootfs_tar, tmp_path_factory.mktemp("rootfs"))


@pytest.fixture
def systemd_node_factory(node_rootfs: Path, tmp_path: Path) -> Iterator[Callable[..., SystemdNode]]:
    nodes: list[SystemdNode] = []

    def make(binds: list[tuple[str, str]] | None = None, ro_binds: list[tuple[str, str]] | None = None,
             name: str | None = None) -> SystemdNode:
        node_name = name or f"node{len(nodes)}-{tmp_path.name[-8:]}".replace("_", "-")
        # A cgroup of its own (as every landscape node has): parallel test workers share one caller cgroup, and a
        # node stopping there removed the shared "payload" under another's unit starting (219/CGROUP, seen in CI).
        node = SystemdNode(node_rootfs, tmp_path / f"node{len(nodes)}", binds=binds, ro_binds=ro_binds,
                           name=node_name, own_cgroup=own_cgroup_name(_test_cgroup_root(node_name)))
        node.workdir.mkdir(parents=True, exist_ok=True)
        nodes.append(node)
        node.boot()
        return node

    yield make
    for node in nodes:
        node.poweroff()
        remove_cgroups(_test_cgroup_root(node.name))


def _test_cgroup_root(node_name: str) -> str:
    return f"crl-test-{node_name}-{os.getpid()}"


@pytest.fixture
def systemd_node(systemd_node_factory: Callable[..., SystemdNode]) -> SystemdNode:
    return systemd_node_factory()
