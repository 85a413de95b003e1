"""The one injectable clock: every service asks it for the current time.

Tests and `seed_demo` move it with `frozen_at()`; nothing else calls `timezone.now()`.
"""

import contextlib
import datetime as dt
import threading
from collections.abc import Callable, Iterator

from django.utils import timezone

_state = threading.local()
_global_override: list[Callable[[], dt.datetime]] = []


def now() -> dt.datetime:
    """Return the current aware UTC time, or the injected one."""
    override = getattr(_state, "override", None) or (
        _global_override[-1] if _global_override else None
    )
    return override() if override else timezone.now()


@contextlib.contextmanager
def frozen_at(moment: dt.datetime, *, all_threads: bool = False) -> Iterator["MovableClock"]:
    """Freeze the clock at `moment` (aware) until the block ends; `.advance()` moves it."""
    if timezone.is_naive(moment):
        raise ValueError("the clock only takes aware datetimes")
    clock = MovableClock(moment)
    if all_threads:
        _global_override.append(clock)
        try:
            yield clock
        finally:
            _global_override.remove(clock)
        return
    previous = getattr(_state, "override", None)
    _state.override = clock
    try:
        yield clock
    finally:
        _state.override = previous


class MovableClock:
    """A clock that stands still until told to move."""

    def __init__(self, moment: dt.datetime) -> None:
        self.moment = moment

    def __call__(self) -> dt.datetime:
        return self.moment

    def set(self, moment: dt.datetime) -> None:
        """Jump to `moment`."""
        self.moment = moment

    def advance(self, **delta: float) -> dt.datetime:
        """Move forward by a timedelta given as keywords (seconds=…, hours=…)."""
        self.moment = self.moment + dt.timedelta(**delta)
        return self.moment
