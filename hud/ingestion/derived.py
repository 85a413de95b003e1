"""The derived layer, kept at write time: one row per logical job and a daily rollup.

`refresh` runs in the transaction that wrote an attempt (a callback, a forward or import, the
sweeper): it re-derives the attempt's logical job from all its attempts, re-derives the other
logical jobs of the same backend and PR whose "superseded" class that write changed, and moves
the daily rollups by the difference between what each row contributed before and after.
`rebuild` derives everything from the attempts alone; both call `derive`, whose outcome rule is
`hud.stats.outcome_class`, so the layer classifies exactly as the statistics do.

Plain SQL on a DB-API cursor (%s placeholders, ON CONFLICT), portable between PostgreSQL and
SQLite, so that `bench/ingest.py`'s floor runs the very same statements through psycopg.
Concurrency: on PostgreSQL a transaction-level advisory lock per backend and PR (per logical
job for pushes and nightlies) serialises the writers whose rows depend on each other; SQLite's
IMMEDIATE transactions already serialise every writer. Rollups change only by increments, in
key order, so writers of different PRs on the same day commute and cannot deadlock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from hud import stats
from hud.core import revisions

LogicalKey = tuple[int, str, str, str, str]  # downstream_id, event_type, head_sha, workflow, job
ShaTimes = Mapping[int, Mapping[str, dt.datetime]]  # PR number → head SHA → latest placed_at
Contribution = dict[str, dict[str, int]]  # ISO day → rollup field → count

# Counting columns of hud_dailyrollup (hud.models.derived.DailyRollup), in order.
ROLLUP_FIELDS = (
    # Logical jobs whose latest attempt is placed on the day, by outcome class.
    "success",
    "failure",
    "timed_out",
    "cancelled",
    "superseded",
    "excluded",
    # The same jobs' first attempts, how many were re-run, their failed tests.
    "first_success",
    "first_counted",
    "completed_jobs",
    "rerun_jobs",
    "failed_tests",
    # Attempts placed on the day (timing is per attempt: each one used a runner).
    "completed_attempts",
    "runs",
    "queue_n",
    "queue_ms",
    "execution_n",
    "execution_ms",
    "end_to_end_n",
    "end_to_end_ms",
    "overrun_known",
    "overrun",
)
KEY_COLUMNS = ("downstream_id", "event_type", "head_sha", "workflow_name", "job_name")
LOGICAL_JOB_COLUMNS = (
    *KEY_COLUMNS,
    "pr_number",
    "first_pr_number",
    "ref",
    "latest_job_id",
    "latest_status",
    "latest_conclusion",
    "outcome",
    "first_outcome",
    "attempts",
    "queue_seconds",
    "execution_seconds",
    "closed_by_sweeper",
    "failed_tests",
    "flake_eligible",
    "flaky",
    "placed_at",
    "first_placed_at",
    "last_placed_at",
    "rollup_contribution",
)
_KEY_WHERE = " AND ".join(f"{column} = %s" for column in KEY_COLUMNS)
_ATTEMPT_COLUMNS = (
    "id",
    "run_id",
    "run_attempt",
    "status",
    "conclusion",
    "placed_at",
    "queue_seconds",
    "execution_seconds",
    "closed_by_sweeper",
    "pr_number",
    "ref",
    "head_sha",
)
_COUNTS = "(SELECT COUNT(*) FROM hud_failedtest f WHERE f.job_id = j.id)"
SELECT_ATTEMPTS = (
    f"SELECT {', '.join(f'j.{c}' for c in _ATTEMPT_COLUMNS)}, {_COUNTS} FROM hud_job j"
    f" WHERE {' AND '.join(f'j.{c} = %s' for c in KEY_COLUMNS)}"
    " ORDER BY j.run_id, j.run_attempt, j.id"
)
SELECT_SHA_TIMES = (
    "SELECT head_sha, MAX(placed_at) FROM hud_job WHERE downstream_id = %s AND pr_number = %s"
    " GROUP BY head_sha"
)
SELECT_CONTRIBUTION = f"SELECT rollup_contribution FROM hud_logicaljob WHERE {_KEY_WHERE}"
# The logical jobs of a PR whose class could flip between cancelled and superseded.
SELECT_CANCELLED = (
    f"SELECT {', '.join(KEY_COLUMNS)}, outcome, pr_number, placed_at,"
    " first_outcome, first_pr_number, first_placed_at FROM hud_logicaljob"
    " WHERE downstream_id = %s AND ((pr_number = %s AND outcome IN ('cancelled', 'superseded'))"
    " OR (first_pr_number = %s AND first_outcome IN ('cancelled', 'superseded')))"
)
UPSERT_LOGICAL_JOB = (
    f"INSERT INTO hud_logicaljob ({', '.join(LOGICAL_JOB_COLUMNS)})"
    f" VALUES ({', '.join(['%s'] * len(LOGICAL_JOB_COLUMNS))})"
    f" ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in LOGICAL_JOB_COLUMNS[len(KEY_COLUMNS) :])
)
# A rebuild's rows (each key once, after the table was emptied): `revision` is left to the
# column's default, so migration 0009, which rebuilds the layer before 0011 adds the column,
# runs this very statement.
_ROLLUP_COLUMNS = f"downstream_id, event_type, day, {', '.join(ROLLUP_FIELDS)}"
_ROLLUP_VALUES = ", ".join(["%s"] * (3 + len(ROLLUP_FIELDS)))
FILL_ROLLUP = f"INSERT INTO hud_dailyrollup ({_ROLLUP_COLUMNS}) VALUES ({_ROLLUP_VALUES})"
# A write's increments, raising the row's revision (hud.reads.rollups reads it).
UPSERT_ROLLUP = (
    f"INSERT INTO hud_dailyrollup ({_ROLLUP_COLUMNS}, revision) VALUES ({_ROLLUP_VALUES}, 1)"
    " ON CONFLICT (downstream_id, event_type, day) DO UPDATE SET "
    + ", ".join(f"{f} = hud_dailyrollup.{f} + excluded.{f}" for f in ROLLUP_FIELDS)
    + ", revision = hud_dailyrollup.revision + 1"
)
ADVISORY_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"


@dataclass(frozen=True)
class Attempt:
    """One attempt row as the derivation needs it."""

    id: int
    run_id: int
    run_attempt: int
    status: str
    conclusion: str
    placed_at: dt.datetime
    queue_seconds: float | None
    execution_seconds: float | None
    closed_by_sweeper: bool
    pr_number: int
    ref: str
    head_sha: str
    failed_tests: int


@dataclass(frozen=True)
class Derived:
    """The values of one logical job's row, and what it adds to the daily rollups."""

    pr_number: int
    first_pr_number: int
    ref: str
    latest_job_id: int
    latest_status: str
    latest_conclusion: str
    outcome: str
    first_outcome: str
    attempts: int
    queue_seconds: float | None
    execution_seconds: float | None
    closed_by_sweeper: bool
    failed_tests: int
    flake_eligible: bool
    flaky: bool
    placed_at: dt.datetime
    first_placed_at: dt.datetime
    last_placed_at: dt.datetime
    contribution: Contribution


# --------------------------------------------------------------------------- pure rules


def _class(attempt: Attempt, shas: ShaTimes) -> str:
    superseded = stats.is_superseded(attempt.pr_number, attempt.head_sha, attempt.placed_at, shas)
    return stats.outcome_class(attempt.status, attempt.conclusion, superseded)


def _attempt_key(attempt: Attempt) -> tuple[int, int]:
    return attempt.run_id, attempt.run_attempt


def _day(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).date().isoformat()


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _worst_leg(legs: Sequence[Attempt]) -> Attempt:
    """The row standing for one attempt, as `hud.stats` picks it: the worst leg (then the last
    by id); still in progress while any leg is, so a passing leg never hides a failing one."""
    worst = max(legs, key=lambda leg: (stats.LEG_SEVERITY.get(leg.conclusion, 0), leg.id))
    if any(leg.status != "completed" for leg in legs):
        return dataclasses.replace(worst, status="in_progress", conclusion="")
    return worst


def derive(attempts: Sequence[Attempt], shas: ShaTimes) -> Derived:
    """One logical job's row from its rows in attempt order (run_id, run_attempt, id); rows
    sharing run_id and run_attempt are the legs of one attempt."""
    legs = [list(group) for _, group in itertools.groupby(attempts, _attempt_key)]
    first, latest = _worst_leg(legs[0]), _worst_leg(legs[-1])
    # Flakiness (hud.stats.flaky_jobs): a finished attempt failed and another passed.
    finished = {_worst_leg(attempt).conclusion for attempt in legs}
    has_failure, has_success = stats.FAILURE in finished, stats.SUCCESS in finished
    failed_tests = sum(leg.failed_tests for leg in legs[-1])  # every leg of the latest attempt
    outcome, first_outcome = _class(latest, shas), _class(first, shas)
    contribution: Contribution = defaultdict(lambda: defaultdict(int))
    day = contribution[_day(latest.placed_at)]
    day[outcome] += 1
    if latest.status == "completed":
        day["completed_jobs"] += 1
        day["rerun_jobs"] += len(legs) > 1
    day["failed_tests"] += failed_tests
    # First-attempt figures are placed by the logical job's last row (hud.stats.first_attempts).
    last_day = contribution[_day(attempts[-1].placed_at)]
    last_day["first_success"] += first_outcome == stats.SUCCESS
    last_day["first_counted"] += first_outcome in stats.COUNTED
    for attempt in attempts:
        _add_timing(contribution, attempt)
    return Derived(
        pr_number=latest.pr_number,
        first_pr_number=first.pr_number,
        ref=latest.ref,
        latest_job_id=latest.id,
        latest_status=latest.status,
        latest_conclusion=latest.conclusion,
        outcome=outcome,
        first_outcome=first_outcome,
        attempts=len(legs),
        queue_seconds=latest.queue_seconds,
        execution_seconds=latest.execution_seconds,
        closed_by_sweeper=latest.closed_by_sweeper,
        failed_tests=failed_tests,
        flake_eligible=has_failure or has_success,
        flaky=has_failure and has_success,
        placed_at=latest.placed_at,
        first_placed_at=first.placed_at,
        last_placed_at=attempts[-1].placed_at,
        contribution=_without_zeros(contribution),
    )


def _add_timing(contribution: Contribution, attempt: Attempt) -> None:
    """An attempt's timing, on its own day (the population of hud.stats.timed_attempts)."""
    if attempt.status != "completed":
        return
    day = contribution[_day(attempt.placed_at)]
    day["completed_attempts"] += 1
    if attempt.conclusion == "skipped":
        return
    day["runs"] += 1
    queue, execution = attempt.queue_seconds, attempt.execution_seconds
    if queue is not None:
        day["queue_n"] += 1
        day["queue_ms"] += _ms(queue)
    end_to_end = None if execution is None else execution + (queue or 0.0)
    if end_to_end is not None:
        day["execution_n"] += 1
        day["execution_ms"] += _ms(execution)
        day["end_to_end_n"] += 1
        day["end_to_end_ms"] += _ms(end_to_end)
    if attempt.closed_by_sweeper or end_to_end is not None:
        day["overrun_known"] += 1
        day["overrun"] += attempt.closed_by_sweeper or end_to_end > stats.OVERRUN_SECONDS


def _without_zeros(contribution: Mapping[str, Mapping[str, int]]) -> Contribution:
    cleaned = {
        day: {field: int(n) for field, n in sorted(fields.items()) if n}
        for day, fields in sorted(contribution.items())
    }
    return {day: fields for day, fields in cleaned.items() if fields}


def difference(before: Contribution, after: Contribution) -> Contribution:
    """What to add to the rollups to move them from `before` to `after`."""
    delta: Contribution = defaultdict(lambda: defaultdict(int))
    for day, fields in after.items():
        for field, n in fields.items():
            delta[day][field] += n
    for day, fields in before.items():
        for field, n in fields.items():
            delta[day][field] -= n
    return _without_zeros(delta)


# --------------------------------------------------------------------------- database values


def _moment(value: Any) -> dt.datetime:
    """A datetime read by plain SQL: SQLite gives naive (UTC) ones, or text from an aggregate."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


def _stored_moment(vendor: str, value: dt.datetime) -> Any:
    """A datetime parameter as the ORM stores it (SQLite: naive UTC text)."""
    if vendor == "postgresql":
        return value
    return str(value.astimezone(dt.UTC).replace(tzinfo=None))


def _attempt(row: Sequence[Any]) -> Attempt:
    values = dict(zip(_ATTEMPT_COLUMNS, row[:-1], strict=True))
    values["placed_at"] = _moment(values["placed_at"])
    values["closed_by_sweeper"] = bool(values["closed_by_sweeper"])
    values["conclusion"] = values["conclusion"] or ""
    return Attempt(**values, failed_tests=int(row[-1]))


def _row(vendor: str, key: LogicalKey, derived: Derived) -> list[Any]:
    values = [getattr(derived, column) for column in LOGICAL_JOB_COLUMNS[len(KEY_COLUMNS) : -4]]
    return [
        *key,
        *values,
        _stored_moment(vendor, derived.placed_at),
        _stored_moment(vendor, derived.first_placed_at),
        _stored_moment(vendor, derived.last_placed_at),
        json.dumps(derived.contribution, sort_keys=True),
    ]


def _write_rollups(
    cursor: Any,
    vendor: str,
    downstream_id: int,
    deltas: Mapping[tuple[str, str], Mapping],
    statement: str = UPSERT_ROLLUP,
) -> None:
    """Add each (event type, day)'s increments, in key order so writers never deadlock."""
    rows = []
    for (event_type, day), fields in sorted(deltas.items()):
        if not any(fields.values()):
            continue
        day_value = dt.date.fromisoformat(day) if vendor == "postgresql" else day
        rows.append(
            [downstream_id, event_type, day_value, *(fields.get(f, 0) for f in ROLLUP_FIELDS)]
        )
    if rows:
        cursor.executemany(statement, rows)


# --------------------------------------------------------------------------- incremental


class _Session:
    """One refresh: a cursor, its vendor, and the PR head-SHA times read so far."""

    def __init__(self, cursor: Any, vendor: str, downstream_id: int):
        self.cursor, self.vendor, self.downstream_id = cursor, vendor, downstream_id
        self.shas: dict[int, dict[str, dt.datetime]] = {}
        self.deltas: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def sha_times(self, pr_numbers: Iterable[int]) -> ShaTimes:
        for pr_number in pr_numbers:
            if pr_number and pr_number not in self.shas:
                self.cursor.execute(SELECT_SHA_TIMES, (self.downstream_id, pr_number))
                self.shas[pr_number] = {
                    sha: _moment(t) for sha, t in self.cursor.fetchall() if t is not None
                }
        return self.shas

    def rederive(self, key: LogicalKey) -> None:
        """Derive one logical job from its attempts, store it and queue its rollup change."""
        self.cursor.execute(SELECT_ATTEMPTS, key)
        attempts = [_attempt(row) for row in self.cursor.fetchall()]
        derived = derive(attempts, self.sha_times({a.pr_number for a in attempts}))
        self.cursor.execute(SELECT_CONTRIBUTION, key)
        stored = self.cursor.fetchone()
        before = json.loads(stored[0]) if stored else {}
        for day, fields in difference(before, derived.contribution).items():
            for field, n in fields.items():
                self.deltas[(key[1], day)][field] += n
        self.cursor.execute(UPSERT_LOGICAL_JOB, _row(self.vendor, key, derived))

    def stale_cancels(self, pr_number: int, written: LogicalKey) -> list[LogicalKey]:
        """The PR's other logical jobs whose cancelled/superseded class no longer holds."""
        self.cursor.execute(SELECT_CANCELLED, (self.downstream_id, pr_number, pr_number))
        shas = self.sha_times([pr_number])
        stale = []
        for row in self.cursor.fetchall():
            key, classes = row[:5], (row[5:8], row[8:11])
            if key == written:
                continue
            for stored, attempt_pr, moment in classes:
                if attempt_pr != pr_number or stored not in (stats.CANCELLED, stats.SUPERSEDED):
                    continue
                now_superseded = stats.is_superseded(pr_number, key[2], _moment(moment), shas)
                if now_superseded != (stored == stats.SUPERSEDED):
                    stale.append(key)
                    break
        return stale


def refresh(cursor: Any, vendor: str, key: LogicalKey, pr_number: int) -> None:
    """Bring the derived layer up to date after an attempt of logical job `key` (on PR
    `pr_number`, 0 for none) was written; call it in the transaction that wrote it."""
    if vendor == "postgresql":
        scope = f"pr:{key[0]}:{pr_number}" if pr_number else "job:" + "\x1f".join(map(str, key))
        cursor.execute(ADVISORY_LOCK, (f"crcr-derived:{scope}",))
    session = _Session(cursor, vendor, key[0])
    session.rederive(key)
    if pr_number:
        for other in session.stale_cancels(pr_number, key):
            session.rederive(other)
    _write_rollups(cursor, vendor, key[0], session.deltas)


def refresh_job(job: Any) -> None:
    """`refresh` for a hud.models.Job just written on the default connection, and a new
    revision of its backend (`hud.core.revisions`) now and again once the write commits, so
    nothing computed from the rows before it, or between the two, passes for current."""
    key = (job.downstream_id, job.event_type, job.head_sha, job.workflow_name, job.job_name)
    with connection.cursor() as cursor:
        refresh(cursor, connection.vendor, key, job.pr_number)
    revisions.bump(job.downstream_id, revisions.RESULTS)
    transaction.on_commit(functools.partial(revisions.bump, job.downstream_id, revisions.RESULTS))


# --------------------------------------------------------------------------- rebuild

_REBUILD_ATTEMPTS = (
    f"SELECT {', '.join(f'j.{c}' for c in KEY_COLUMNS)},"
    f" {', '.join(f'j.{c}' for c in _ATTEMPT_COLUMNS)}, COALESCE(f.n, 0) FROM hud_job j"
    " LEFT JOIN (SELECT job_id, COUNT(*) AS n FROM hud_failedtest GROUP BY job_id) f"
    " ON f.job_id = j.id"
    f" ORDER BY {', '.join(f'j.{c}' for c in KEY_COLUMNS)}, j.run_id, j.run_attempt, j.id"
)
_REBUILD_SHA_TIMES = (
    "SELECT downstream_id, pr_number, head_sha, MAX(placed_at) FROM hud_job"
    " WHERE pr_number <> 0 GROUP BY downstream_id, pr_number, head_sha"
)
COUNT_ATTEMPTS = "SELECT COUNT(*) FROM hud_job"
_BATCH = 2000


def rebuild(
    cursor: Any, stream: Any, vendor: str, progress: Callable[[int], None] = lambda _: None
) -> int:
    """Recompute the whole layer from the attempts; `stream` is a cursor for the long read
    (server-side on PostgreSQL). Calls `progress(n)` per batch of attempts read. Returns the
    number of logical jobs."""
    cursor.execute("DELETE FROM hud_dailyrollup")
    cursor.execute("DELETE FROM hud_logicaljob")
    if vendor == "postgresql":
        # Fresh statistics first: after a bulk load (COPY, a restore) the planner may think the
        # attempts few and pick, for the server-side cursor, a plan that takes hours.
        cursor.execute("ANALYZE hud_job, hud_failedtest")
    cursor.execute(_REBUILD_SHA_TIMES)
    shas: dict[int, dict[int, dict[str, dt.datetime]]] = defaultdict(lambda: defaultdict(dict))
    for downstream_id, pr_number, sha, moment in cursor.fetchall():
        shas[downstream_id][pr_number][sha] = _moment(moment)
    rollups: dict[int, dict[tuple[str, str], dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    stream.execute(_REBUILD_ATTEMPTS)
    width = len(KEY_COLUMNS)
    pending: list[list[Any]] = []
    jobs = 0

    def rows() -> Iterable[Sequence[Any]]:
        while batch := stream.fetchmany(_BATCH):
            yield from batch
            progress(len(batch))

    for key, group in itertools.groupby(rows(), key=lambda row: tuple(row[:width])):
        attempts = [_attempt(row[width:]) for row in group]
        derived = derive(attempts, shas[key[0]])
        for day, fields in derived.contribution.items():
            for field, n in fields.items():
                rollups[key[0]][(key[1], day)][field] += n
        pending.append(_row(vendor, key, derived))
        jobs += 1
        if len(pending) >= _BATCH:
            cursor.executemany(UPSERT_LOGICAL_JOB, pending)
            pending = []
    if pending:
        cursor.executemany(UPSERT_LOGICAL_JOB, pending)
    for downstream_id, deltas in sorted(rollups.items()):
        _write_rollups(cursor, vendor, downstream_id, deltas, FILL_ROLLUP)
    return jobs
