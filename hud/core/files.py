"""Configuration files parsed once per process and file version.

The gate policy, its `attribution:` block and the infra signatures are read on every page,
evaluation and verdict. `parsed` keeps each parse per (file, parser) with the (mtime, size)
it was read at: the same object while the file stays as it is, a fresh parse as soon as it
changes (edits apply at once, no restart). A parser that raises keeps nothing, so every call
reports a broken file until it is fixed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_parsed: dict[tuple[Path, Callable[[Path], Any]], tuple[tuple[int, int], Any]] = {}
_lock = threading.Lock()


def version(path: Path) -> tuple[int, int]:
    """The file's version as `parsed` tells versions apart: (modification time, size)."""
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def parsed(path: Path, parse: Callable[[Path], T]) -> T:
    """`parse(path)`, reused while the file's modification time and size stay the same."""
    version_now = version(path)
    key = (path, parse)
    with _lock:
        cached = _parsed.get(key)
    if cached is not None and cached[0] == version_now:
        return cached[1]
    value = parse(path)
    with _lock:
        _parsed[key] = (version_now, value)
    return value
