"""Revision tokens per backend, changed by every write that a backend's gate reads.

Two scopes: `results` (a stored attempt, re-run or sweeper close) and `settings` (an exclusion,
override, level change or the backend's own row). Kept in Django's cache (local memory
embedded, Redis in production), so every process that writes or reads sees the same tokens. A
token is random, not a counter: a token evicted from the cache, or a cache cleared, comes back
as a new value, and nothing computed before can match it. Readers keep what they computed with
the tokens they read first (`hud.promotion.snapshot`): a write in between changes a token, and
the result is never served as current.
"""

from __future__ import annotations

import secrets

from django.core.cache import cache

RESULTS = "results"
SETTINGS = "settings"


def _key(downstream_id: int, scope: str) -> str:
    return f"crcr:revision:{scope}:{downstream_id}"


def bump(downstream_id: int, scope: str = RESULTS) -> None:
    """Mark everything computed from this backend's rows of `scope` so far as out of date."""
    cache.set(_key(downstream_id, scope), secrets.token_hex(8), timeout=None)


def current(downstream_id: int, scope: str = RESULTS) -> str:
    """This backend's revision token of `scope` now (a new one when none is kept)."""
    key = _key(downstream_id, scope)
    token = cache.get(key)
    if token is None:
        token = secrets.token_hex(8)
        # Two readers may race here: `add` keeps the first, and both use what it kept.
        cache.add(key, token, timeout=None)
        token = cache.get(key, token)
    return token
