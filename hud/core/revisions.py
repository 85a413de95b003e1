"""Revision tokens per backend, changed by every write that a backend's gate reads.

Two scopes: `results` (a stored attempt, re-run or sweeper close) and `settings` (an exclusion,
override, level change or the backend's own row). Kept in Django's cache (files embedded, Redis
in production), so every process that writes or reads sees the same tokens. A token is random,
not a counter: a token evicted from the cache, or a cache cleared, comes back as a new value,
and nothing computed before can match it. That is also how a write changes it: `bump` forgets
the token, and the next reader draws a new one. Forgetting costs a writer one unlink or DEL
(a new token written to a file cost ~0.3 ms, twice per callback); a burst of writes leaves one
token to draw, by the first reader after it. Readers keep what they computed with the tokens
they read first (`hud.promotion.snapshot`): a write in between changes a token, and the result
is never served as current.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Iterator

from django.core.cache import cache

RESULTS = "results"
SETTINGS = "settings"
# Inside `deferred()`: the (backend, scope) pairs bumped so far, each written once at its end.
_deferred: set[tuple[int, str]] | None = None
_deferred_lock = threading.Lock()


def _key(downstream_id: int, scope: str) -> str:
    return f"crcr:revision:{scope}:{downstream_id}"


def bump(downstream_id: int, scope: str = RESULTS) -> None:
    """Mark everything computed from this backend's rows of `scope` so far as out of date."""
    with _deferred_lock:
        if _deferred is not None:
            _deferred.add((downstream_id, scope))
            return
    cache.delete(_key(downstream_id, scope))


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Bulk loading (`seed_demo`): every backend and scope bumped inside is bumped once, at
    the end, rather than on each of thousands of writes (each an unlink in the file cache).
    What is computed inside may be kept under a token the end replaces, never passed for
    current after it."""
    global _deferred
    with _deferred_lock:
        if _deferred is not None:
            raise RuntimeError("revisions.deferred() does not nest")
        _deferred = set()
    try:
        yield
    finally:
        with _deferred_lock:
            pending, _deferred = _deferred, None
        for downstream_id, scope in sorted(pending):
            bump(downstream_id, scope)


def current(downstream_id: int, scope: str = RESULTS) -> str:
    """This backend's revision token of `scope` now (a new one when none is kept)."""
    key = _key(downstream_id, scope)
    token = cache.get(key)
    if token is None:
        token = secrets.token_hex(8)
        # Two readers may race here. Redis's `add` keeps the first, and both use what it kept;
        # the file cache's (a look, then a write) may let the second overwrite the first's,
        # whose results then never match: a miss, never a stale hit.
        cache.add(key, token, timeout=None)
        token = cache.get(key, token)
    return token
