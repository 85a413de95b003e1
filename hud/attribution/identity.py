"""What names a thing in attribution: a test id, a failure signature, an origin (what makes two
failures unrelated), a logical job's key, and the plain forms of times and references."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from hud import stats

LogicalKey = tuple[str, str, str, str, str]


def failed_test_id(classname: str, name: str) -> str:
    """A test's identity: `classname::name` (just `name` when there is no class)."""
    return f"{classname}::{name}" if classname else name


# What varies between runs of the same failure, most specific first: ids, addresses, paths,
# numbers. What is left is the failure's signature (the way LUCI Analysis clusters reasons).
_SIGNATURE_NOISE = (
    (
        re.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
        ),
        "<id>",
    ),
    (re.compile(r"0[xX][0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}\b"), "<id>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@-]+){2,}[\\/]?"), "<path>"),
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
)


def failure_signature(message: str) -> str:
    """A failure message with numbers, addresses, paths and ids stripped (first 300 chars)."""
    return _signature((message or "")[:2000])


# A failure's message repeats on every run that fails the same way (the 61,435 failed tests of
# bench/pages.py's 1M history carry 31 messages): each is stripped once per process, not once
# per failure read. At most ~10 MB held, for messages at the 2,000-character cut.
@functools.lru_cache(maxsize=4096)
def _signature(text: str) -> str:
    for pattern, replacement in _SIGNATURE_NOISE:
        text = pattern.sub(replacement, text)
    return text.strip()[:300]


def split_failed_test_id(identifier: str) -> tuple[str, str]:
    """(classname, name) of a test id made by `failed_test_id`."""
    classname, sep, name = identifier.rpartition("::")
    return (classname, name) if sep else ("", identifier)


def _test_set(tests: list[dict[str, Any]]) -> set[str]:
    return {failed_test_id(t["classname"], t["name"]) for t in tests}


def origin_of(pr_number: int, event_type: str, head_sha: str) -> str:
    """What makes two failures unrelated: a PR (every commit of it), else the commit itself."""
    return f"pr#{pr_number}" if pr_number else f"{event_type}:{head_sha}"


def logical_key(row: Mapping[str, Any]) -> LogicalKey:
    """The logical job of a row or verdict that has the key's columns (`downstream` by name)."""
    return (
        row["downstream"],
        row["event_type"],
        row["head_sha"],
        row["workflow_name"],
        row["job_name"],
    )


# A failed-test row names its attempt's columns through its job.
FAILED_TEST_ATTEMPT = {"run_id": "job__run_id", "run_attempt": "job__run_attempt", "id": "job_id"}


def _attempt_order(row: Mapping[str, Any], columns: Mapping[str, str] | None = None) -> tuple:
    """Where an attempt row stands among its logical job's attempts: hud.stats.ATTEMPT_ORDER
    (the one ordering), read from `columns` (ATTEMPT_ORDER name -> row key) when renamed."""
    return tuple(row[(columns or {}).get(name, name)] for name in stats.ATTEMPT_ORDER)


def _moment(value: Any) -> dt.datetime:
    return pd.Timestamp(value).to_pydatetime()


def _when(value: Any) -> str | None:
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    return value.isoformat()


def _ref_summary(row: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "job_id": int(row["id"]),
        "head_sha": row["head_sha"],
        "event_type": row["event_type"],
        "outcome": row["outcome"],
        "placed_at": _when(row["placed_at"]),
        "workflow_url": row.get("workflow_url", ""),
    }
