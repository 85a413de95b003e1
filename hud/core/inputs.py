"""The one validation layer for values from outside: bodies, trusted forward values, queries.

Pure (no models). Every refusal is a `PayloadError` naming the dotted path of the field, so
the endpoints answer a 400 with the shared error body. Nothing here changes a value: a value
is either accepted as sent or refused.
"""

import datetime as dt
import json
import math
import re
from typing import Any

MAX_DEPTH = 32
MAX_NUMBER_CHARS = 40
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
# Times a CI result can honestly carry; also keeps every offset arithmetic inside datetime's range.
EARLIEST_TIME = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
LATEST_TIME = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_EARLIEST_NAIVE = EARLIEST_TIME.replace(tzinfo=None)
_LATEST_NAIVE = LATEST_TIME.replace(tzinfo=None)

# A duration longer than a year is no CI job's; bounding it keeps sums and means finite.
MAX_SECONDS = 366 * 24 * 3600.0

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# The escapes through which a decoded JSON string can hold a NUL or a lone surrogate (a pair is
# matched too: the string walk then tells them apart).
_RISKY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_ASCII_DIGITS = re.compile(r"^[0-9]{1,18}$")


def error_body(code: str, detail: str, field: str | None = None) -> dict[str, Any]:
    """The error body of every refusal (CRCR.md, "Callback answers")."""
    return {"ok": False, "error": code, "detail": detail, "field": field}


class PayloadError(Exception):
    """A value that breaks the wire format; becomes a 400 naming `field`."""

    def __init__(self, detail: str, field: str | None = None, code: str = "invalid_body"):
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.code = code


class _OversizedNumber(str):
    """A number literal too long to convert; kept as text so the walk can name its field."""


def _parse_number(literal: str) -> Any:
    if len(literal) > MAX_NUMBER_CHARS:
        return _OversizedNumber(literal)
    return float(literal) if any(c in literal for c in ".eE") else int(literal)


def loads(text: str) -> Any:
    """Decode JSON with number literals bounded before conversion, then check every value."""
    try:
        value = json.loads(text, parse_int=_parse_number, parse_float=_parse_number)
    except RecursionError as exc:
        raise PayloadError("body is nested too deeply", None, "invalid_json") from exc
    except json.JSONDecodeError as exc:
        raise PayloadError(
            f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            None,
            "invalid_json",
        ) from exc
    check_json_value(value, texts=_may_hold_bad_text(text))
    return value


def _may_hold_bad_text(text: str) -> bool:
    """Whether a string or key decoded from JSON `text` may hold what `text_problem` refuses:
    only a NUL or surrogate in the text itself or a `\\u` escape of one puts it there (strict
    JSON refuses raw control characters in strings). One scan of the body instead of one check
    per string."""
    return "\x00" in text or bool(_LONE_SURROGATE.search(text) or _RISKY_ESCAPE.search(text))


def _key_path(parent: str, key: str) -> str:
    shown = key.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{parent}.{shown}" if parent else shown


def text_problem(value: str) -> str | None:
    """Why a string cannot be stored as sent (NUL, lone surrogate), or None."""
    if "\x00" in value:
        return "contains a NUL character"
    if _LONE_SURROGATE.search(value):
        return "contains a lone surrogate (not valid Unicode)"
    return None


def _path(parent: str, key: str | int | None) -> str:
    """The dotted path of a child (`key`: its key or index; None: the root itself)."""
    if key is None:
        return parent
    return f"{parent}[{key}]" if isinstance(key, int) else _key_path(parent, key)


def _refusal(parent: str, key: str | int | None, what: str) -> PayloadError:
    """The refusal of the value at `key` of `parent`: "<its path> <what>", naming the path."""
    path = _path(parent, key)
    return PayloadError(f"{path or 'body'} {what}", path)


def check_json_value(value: Any, root: str = "", *, texts: bool = True) -> None:
    """Refuse, naming the path, a decoded JSON value no column or jsonb could hold as sent.
    Without `texts` the strings and keys are known to pass `text_problem` (`loads` scanned
    the body) and are not checked one by one. A path is built only for a container or a
    refusal."""
    stack: list[tuple[Any, str, str | int | None, int]] = [(value, root, None, 0)]
    while stack:
        item, parent, key, depth = stack.pop()
        if isinstance(item, str):
            if isinstance(item, _OversizedNumber):
                raise _refusal(
                    parent, key, f"is a number longer than {MAX_NUMBER_CHARS} characters"
                )
            problem = text_problem(item) if texts else None
            if problem:
                raise _refusal(parent, key, problem)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -INT64_MAX <= item <= INT64_MAX:
                raise _refusal(parent, key, "is outside the 64-bit integer range")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise _refusal(parent, key, "must be a finite number")
        elif isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                raise _refusal(parent, key, f"is nested deeper than {MAX_DEPTH} levels")
            path = _path(parent, key)
            if isinstance(item, list):
                stack.extend((child, path, index, depth + 1) for index, child in enumerate(item))
                continue
            for child_key, child in item.items():
                problem = text_problem(child_key) if texts else None
                if problem:
                    raise PayloadError(f"a key of {path or 'body'} {problem}", path or None)
                stack.append((child, path, child_key, depth + 1))


def integer_in_range(value: int, path: str, low: int, high: int) -> int:
    """`value` if within [low, high] (the column it lands in), else a PayloadError."""
    if not low <= value <= high:
        raise PayloadError(f"{path} must be a whole number from {low} to {high}", path)
    return value


def seconds(value: Any, path: str) -> float | None:
    """A duration in seconds: null, or a finite number from 0 to MAX_SECONDS."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PayloadError(f"{path} must be a number of seconds or null", path)
    if not 0 <= value <= MAX_SECONDS:
        raise PayloadError(f"{path} must be from 0 to {MAX_SECONDS:.0f} seconds", path)
    return float(value)


def whole_number(raw: str, low: int, high: int) -> int | None:
    """An ASCII whole number within [low, high], or None (Unicode digits such as ² are not)."""
    if not _ASCII_DIGITS.match(raw):
        return None
    number = int(raw)
    return number if low <= number <= high else None


def aware_time(raw: str, path: str, *, default_utc: bool = False) -> dt.datetime:
    """An ISO 8601 time within [EARLIEST_TIME, LATEST_TIME], in UTC; a PayloadError otherwise.

    `default_utc`: a time without a zone is read as UTC (query strings) instead of refused.
    """
    try:
        parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise PayloadError(f"{path} must be an ISO 8601 time", path) from exc
    if parsed.tzinfo is None:
        if not default_utc:
            raise PayloadError(f"{path} must carry a time zone (e.g. a trailing Z)", path)
        parsed = parsed.replace(tzinfo=dt.UTC)
    naive, offset = parsed.replace(tzinfo=None), parsed.utcoffset() or dt.timedelta(0)
    if not _EARLIEST_NAIVE + offset <= naive < _LATEST_NAIVE + offset:
        raise PayloadError(
            f"{path} must be between {EARLIEST_TIME:%Y-%m-%d} and {LATEST_TIME:%Y-%m-%d}", path
        )
    return parsed.astimezone(dt.UTC)
