"""Shared fixtures: no unplanned network, a frozen clock, builders for domain rows."""

import datetime as dt
import fcntl
import os
import socket

import pytest

from hud.core import clock

pytest_plugins = ["tests.support.oidc", "tests.support.fake_github", "tests.support.tasks"]

_LOCAL_HOSTS = {"127.0.0.1", "::1", "localhost"}
# Tests that start a browser, a Celery worker or their own servers, or run long timed loads.
_EXCLUSIVE_MARKERS = ("browser", "worker", "fuzz")
_real_connect = socket.socket.connect


def _guarded_connect(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and host not in _LOCAL_HOSTS and not host.startswith("/"):
        raise RuntimeError(f"unplanned outbound network call to {address!r} in a test")
    return _real_connect(self, address)


def pytest_collection_modifyitems(config, items):
    """Under `pytest -n N --dist loadgroup`, the heavy tests run one at a time on one worker.

    Each still has its own database, cache prefix, queue and free ports; grouping keeps two of
    them from contending for the same cores against their startup and readiness deadlines.
    """
    for item in items:
        heavy = any(item.get_closest_marker(name) for name in _EXCLUSIVE_MARKERS)
        if heavy or "redis_server" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("exclusive"))


@pytest.fixture(autouse=True)
def _alone_when_marked_serial(request, tmp_path_factory):
    """Under pytest-xdist, a `serial` test holds a lock that every other test shares.

    It waits for the other workers' running tests to end, and they wait for it: a test that
    measures the real clock gets the cores to itself.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    # Each worker's base temp sits in one folder per run: the lock is per run, not per worker.
    path = tmp_path_factory.getbasetemp().parent / "serial.lock"
    serial = request.node.get_closest_marker("serial") is not None
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        yield  # closing the file releases the lock


@pytest.fixture(autouse=True)
def _no_outbound_network(monkeypatch):
    """Any connection to a non-local address fails the test."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)


@pytest.fixture(autouse=True)
def _clear_cache():
    """Each test starts with an empty Django cache (token caches, JWKS, governors)."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


NOW = dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def frozen_clock():
    """The injectable clock frozen at a fixed Monday noon UTC; `.advance(...)` moves it."""
    with clock.frozen_at(NOW, all_threads=True) as moving:
        yield moving
