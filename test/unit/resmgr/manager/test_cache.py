"""The cache's background writer (cri-resmgr saves off the request path): coalesced, flushed, never lost."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from resmgr.manager.cache import Cache, CacheData, CacheEncoder


def state(n: int) -> bytes:
    return CacheEncoder().encode_data(CacheData(config_source=f"state-{n}"))


def test_background_saves_coalesce_and_flush_writes_the_newest(tmp_path: Path, monkeypatch) -> None:
    cache = Cache(tmp_path, background=True)
    writes: list[bytes] = []
    gate = threading.Event()
    real_write = cache._write

    def slow_write(payload: bytes) -> None:
        gate.wait(10)  # the first write is "on disk" only when the test says so
        writes.append(payload)
        real_write(payload)

    monkeypatch.setattr(cache, "_write", slow_write)
    for n in range(50):
        cache.save_encoded(state(n))  # returns at once, however slow the disk
    assert not cache.flush(timeout=0.05)  # still writing
    gate.set()
    assert cache.flush(timeout=10)
    assert cache.load().config_source == "state-49"
    assert len(writes) < 50 and writes[-1] == state(49)  # intermediate states were skipped


def test_a_failed_write_is_logged_and_the_next_save_retries(tmp_path: Path, monkeypatch, caplog) -> None:
    cache = Cache(tmp_path, background=True)
    real_write = cache._write
    failures = [OSError(28, "No space left on device")]

    def flaky(payload: bytes) -> None:
        if failures:
            raise failures.pop()
        real_write(payload)

    monkeypatch.setattr(cache, "_write", flaky)
    with caplog.at_level(logging.ERROR, logger="resmgr.cache"):
        cache.save_encoded(state(1))
        assert cache.flush(timeout=10)
    assert "No space left on device" in caplog.text and not cache.path.exists()
    cache.save_encoded(state(2))
    cache.close()
    assert cache.load().config_source == "state-2"


def test_close_writes_the_pending_state_and_later_saves_are_synchronous(tmp_path: Path) -> None:
    cache = Cache(tmp_path, background=True)
    cache.save_encoded(state(1))
    cache.close()
    assert cache.load().config_source == "state-1"
    cache.save_encoded(state(2))
    assert cache.load().config_source == "state-2"  # no flush needed any more


@pytest.mark.parametrize("background", [False, True])
def test_no_temporary_files_are_left(tmp_path: Path, background: bool) -> None:
    cache = Cache(tmp_path, background=background)
    for n in range(20):
        cache.save_encoded(state(n))
    cache.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_one_encoder_writes_what_load_reads(tmp_path: Path) -> None:
    data = CacheData(pods={"p": {"id": "p"}}, containers={"c": {"id": "c"}, "pending:1": {"id": "x"}},
                     policy="static", policy_data={"grants": {"c": {"pool": "shared"}}, "shared": [1, 2]},
                     config={"policy": {"Active": "static"}}, config_source="agent")
    cache = Cache(tmp_path)
    cache.save_encoded(CacheEncoder(skip_prefix="pending:").encode_data(data))
    loaded = cache.load()
    assert loaded.containers == {"c": {"id": "c"}}  # allocations the runtime did not confirm are not cached
    assert (loaded.pods, loaded.policy, loaded.policy_data, loaded.config, loaded.config_source) == \
        (data.pods, data.policy, data.policy_data, data.config, data.config_source)
    assert json.loads((tmp_path / "cache").read_text())["version"] == 1
