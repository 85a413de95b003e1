"""Broker and cache unreachable, without a Redis server (fast; every CI pass).

The full fault (a real redis-server killed mid-load) is tests/reliability/test_redis_fault.py.
"""

import pytest
from kombu.exceptions import OperationalError

from config.cache import TolerantRedisCache
from hud import tasks
from hud.core import taskqueue
from tests.support.redis_server import free_port


@pytest.mark.django_db
def test_enqueue_logs_a_broker_refusal_instead_of_raising_after_commit(
    settings, monkeypatch, django_capture_on_commit_callbacks, caplog
):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    sent = []

    def refused(*, args, **options):
        sent.append(args)
        raise OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr(tasks.mirror_job, "apply_async", refused)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        taskqueue.enqueue(tasks.mirror_job, 42)  # the commit hook must not raise
    assert len(callbacks) == 1 and sent == [(42,)]
    assert "could not enqueue task" in caplog.text


def test_the_cache_degrades_while_redis_is_unreachable():
    cache = TolerantRedisCache(
        f"redis://127.0.0.1:{free_port()}/0",
        {"OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}},
    )
    assert cache.get("jwks", "missing") == "missing"
    assert cache.get_many(["a", "b"]) == {}
    cache.set("token", {"x": 1}, 60)  # dropped, not raised
    assert cache.add("governor-slot", 1, 60) is True  # the caller goes ahead
    assert cache.delete("token") is False
    with pytest.raises(ValueError):
        cache.incr("counter")
    cache.clear()
