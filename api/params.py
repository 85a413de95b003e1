"""Query-string parsing for the read API: a malformed parameter is a 400 naming it."""

import datetime as dt
import re

from django.http import QueryDict
from rest_framework.exceptions import ValidationError

from hud.core import allowlist, inputs
from hud.core.payload import CONCLUSIONS, EVENT_TYPES
from hud.reads.selectors import JobFilters

SHA_PATTERN = re.compile(r"^[0-9a-fA-F]{7,64}$")


def _invalid(name: str, message: str) -> ValidationError:
    return ValidationError({name: [message]})


def parse_int(
    query: QueryDict, name: str, *, low: int, high: int, default: int | None = None
) -> int | None:
    """An integer parameter within [low, high]."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    number = inputs.whole_number(raw, low, high)
    if number is None:
        raise _invalid(name, f"must be a whole number from {low} to {high}")
    return number


def parse_time(query: QueryDict, name: str) -> dt.datetime | None:
    """An ISO 8601 date or time parameter (UTC when no zone is given)."""
    raw = query.get(name)
    if not raw:
        return None
    try:
        # In UTC: Python takes offsets up to ±23:59, PostgreSQL only up to ±15:59.
        return inputs.aware_time(raw, name, default_utc=True)
    except inputs.PayloadError as exc:
        raise _invalid(name, f"{exc.detail.removeprefix(name + ' ')}, e.g. 2026-11-01") from exc


def parse_choice(query: QueryDict, name: str, choices: tuple[str, ...]) -> str | None:
    """A parameter that must be one of `choices`."""
    raw = query.get(name)
    if not raw:
        return None
    if raw not in choices:
        raise _invalid(name, "must be one of " + ", ".join(choices))
    return raw


def parse_sha(raw: str, name: str = "sha") -> str:
    """A commit SHA or a prefix of at least 7 hex digits."""
    if not SHA_PATTERN.match(raw or ""):
        raise _invalid(name, "must be a commit SHA or a prefix of at least 7 hex digits")
    return raw.lower()


def job_filters(query: QueryDict) -> JobFilters:
    """The filters of `/api/v1/jobs` from a query string."""
    downstream = query.get("downstream") or None
    if downstream and not allowlist.is_repository_name(downstream):
        raise _invalid("downstream", "must be owner/repo")
    sha = query.get("sha") or None
    job_name = query.get("job_name") or None
    if job_name and len(job_name) > 255:
        raise _invalid("job_name", "must be at most 255 characters")
    return JobFilters(
        downstream=downstream,
        sha=parse_sha(sha) if sha else None,
        pr=parse_int(query, "pr", low=0, high=10**9),
        job_name=job_name,
        conclusion=parse_choice(query, "conclusion", CONCLUSIONS),
        status=parse_choice(query, "status", ("in_progress", "completed")),
        event_type=parse_choice(query, "event_type", EVENT_TYPES),
        since=parse_time(query, "since"),
        until=parse_time(query, "until"),
    )
