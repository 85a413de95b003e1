"""Clearing the Redis cache deletes this installation's keys only, never the whole database."""

from config.cache import CLEAR_BATCH, TolerantRedisCache
from tests.reliability.test_redis_fault import redis_server  # noqa: F401  (a fixture)
from tests.support.redis_server import needs_redis_server

pytestmark = needs_redis_server


def _cache(url: str, prefix: str) -> TolerantRedisCache:
    return TolerantRedisCache(url, {"KEY_PREFIX": prefix})


def test_clear_leaves_other_prefixes_and_the_broker_queue_alone(redis_server):  # noqa: F811
    mine = _cache(redis_server.url, "crcr-gw0")
    neighbour = _cache(redis_server.url, "crcr-gw1")
    raw = redis_server.client()
    raw.rpush("celery", "a queued task")
    mine.set_many({f"token-{n}": n for n in range(CLEAR_BATCH * 2 + 5)})  # several DEL batches
    neighbour.set("jwks", "keys")

    mine.clear()

    assert mine.get("token-1") is None
    assert raw.keys("crcr-gw0:*") == []
    assert neighbour.get("jwks") == "keys"
    assert raw.lrange("celery", 0, -1) == [b"a queued task"]


def test_clear_matches_a_prefix_with_glob_characters_literally(redis_server):  # noqa: F811
    globbing = _cache(redis_server.url, "a*")
    other = _cache(redis_server.url, "ab")
    globbing.set("slot", 1)
    other.set("slot", 2)

    globbing.clear()

    assert globbing.get("slot") is None
    assert other.get("slot") == 2
