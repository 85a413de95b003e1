"""Django's Redis cache, degraded instead of failing while Redis is unreachable.

Everything in the cache can be rebuilt (JWKS keys, installation tokens, write-governor slots),
so a stopped Redis must not turn a callback into a 500: reads miss, writes are dropped, and
`add` answers True (the caller goes ahead as if it held the slot or the refresh). Each failure
is logged; the database keeps everything that matters.
"""

import logging
import re
from typing import Any

from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)
CLEAR_BATCH = 1000  # keys per DEL while clearing
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)


def _unreachable(operation: str, error: Exception) -> None:
    logger.warning(
        "cache unavailable, degrading",
        extra={"operation": operation, "error": type(error).__name__},
    )


class TolerantRedisCache(RedisCache):
    """RedisCache whose operations degrade (miss, drop, go ahead) when Redis is unreachable."""

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except UNREACHABLE as error:
            _unreachable("get", error)
            return default

    def get_many(self, keys: Any, version: int | None = None) -> dict:
        try:
            return super().get_many(keys, version)
        except UNREACHABLE as error:
            _unreachable("get_many", error)
            return {}

    def has_key(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().has_key(key, version)
        except UNREACHABLE as error:
            _unreachable("has_key", error)
            return False

    def add(self, key: Any, value: Any, timeout: Any = None, version: int | None = None) -> bool:
        try:
            return super().add(key, value, timeout, version)
        except UNREACHABLE as error:
            _unreachable("add", error)
            return True

    def set(self, key: Any, value: Any, timeout: Any = None, version: int | None = None) -> None:
        try:
            super().set(key, value, timeout, version)
        except UNREACHABLE as error:
            _unreachable("set", error)

    def set_many(self, data: dict, timeout: Any = None, version: int | None = None) -> list:
        try:
            return super().set_many(data, timeout, version)
        except UNREACHABLE as error:
            _unreachable("set_many", error)
            return list(data)

    def touch(self, key: Any, timeout: Any = None, version: int | None = None) -> bool:
        try:
            return super().touch(key, timeout, version)
        except UNREACHABLE as error:
            _unreachable("touch", error)
            return False

    def delete(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().delete(key, version)
        except UNREACHABLE as error:
            _unreachable("delete", error)
            return False

    def delete_many(self, keys: Any, version: int | None = None) -> None:
        try:
            super().delete_many(keys, version)
        except UNREACHABLE as error:
            _unreachable("delete_many", error)

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        try:
            return super().incr(key, delta, version)
        except UNREACHABLE as error:
            _unreachable("incr", error)
            raise ValueError(f"Key {key!r} not found (cache unavailable)") from error

    def clear(self) -> None:
        """Delete this installation's keys (under KEY_PREFIX), not the whole Redis database.

        FLUSHDB would also drop what others keep in the same database: a Celery broker's
        queues, or another parallel test worker's cache (each has its own KEY_PREFIX).
        """
        try:
            client = self._cache.get_client(write=True)
            # make_key() writes "<prefix>:<version>:<key>"; the prefix is matched literally.
            pattern = re.sub(r"([\\*?\[\]])", r"\\\1", self.key_prefix) + ":*"
            batch: list[bytes] = []
            for key in client.scan_iter(match=pattern, count=CLEAR_BATCH):
                batch.append(key)
                if len(batch) == CLEAR_BATCH:
                    client.delete(*batch)
                    batch.clear()
            if batch:
                client.delete(*batch)
        except UNREACHABLE as error:
            _unreachable("clear", error)
