"""A revision token per backend, changed by every write that a backend's gate reads.

Kept in Django's cache (local memory embedded, Redis in production), so every process that
writes or reads sees the same token. A token is random, not a counter: a token evicted from the
cache, or a cache cleared, comes back as a new value, and nothing computed before can match it.
Readers keep what they computed together with the token they read first (`hud.promotion.snapshot`):
a write in between changes the token, and the result is never served as current.
"""

from __future__ import annotations

import secrets

from django.core.cache import cache

_PREFIX = "crcr:revision:"


def _key(downstream_id: int) -> str:
    return f"{_PREFIX}{downstream_id}"


def bump(downstream_id: int) -> None:
    """Mark everything computed from this backend's rows so far as out of date."""
    cache.set(_key(downstream_id), secrets.token_hex(8), timeout=None)


def current(downstream_id: int) -> str:
    """This backend's revision token now (a new one when none is kept)."""
    token = cache.get(_key(downstream_id))
    if token is None:
        token = secrets.token_hex(8)
        # Two readers may race here: `add` keeps the first, and both use what it kept.
        cache.add(_key(downstream_id), token, timeout=None)
        token = cache.get(_key(downstream_id), token)
    return token
