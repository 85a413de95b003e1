"""A backend page's matrix read in SQL: one page of its rows (PR head SHAs, commits), their cells.

The rows are the logical jobs of the derived layer grouped by (event type, PR number, head SHA),
newest first by their newest logical job's placement, then by head SHA, event type and PR
number. The database groups, orders, counts and pages them, so a page reads the 25 rows it
shows and their cells, never the window's every logical job (~800 on a busy backend's week,
read and laid out in pandas, cost the page ~12 ms of Python).

A cell's display status (`DISPLAY`) is `hud.pages.common.cell_status` of the latest attempt,
stuck judged as `hud.stats.stuck_mask` judges it. `tests/pages/test_matrix_read.py` proves a
page equal to `hud.stats`' latest attempts laid out by that rule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from django.db import connection

from hud.models import Job, LogicalJob, sql
from hud.models.sql import any_sql, statement_rows
from hud.reads.rows import STUCK_SQL, stuck_params

_LAYER, _JOBS = LogicalJob._meta.db_table, Job._meta.db_table
# `cell_status` in SQL: the logical job's latest status and conclusion; in progress, stuck when
# the latest attempt's own row is (`rows.STUCK_SQL`). Its parameters: `_display_params`.
DISPLAY = (
    "CASE WHEN lj.latest_status = %s"
    " THEN CASE WHEN lj.latest_conclusion = '' THEN 'neutral' ELSE lj.latest_conclusion END"
    f" WHEN {STUCK_SQL.format(row='j')} THEN 'stuck' ELSE 'in_progress' END"
)


def _display_params(now: dt.datetime) -> list:
    return [Job.Status.COMPLETED, *stuck_params(now)]


@dataclass(frozen=True)
class Scope:
    """Which logical jobs a matrix lays out: a backend's of `events` placed in [start, end),
    optionally of one job name, one PR number and one display status, as of `now`."""

    backend_id: int
    events: Sequence[str]
    start: dt.datetime
    end: dt.datetime
    now: dt.datetime
    job_name: str | None = None
    pr: int | None = None
    display: str | None = None

    def where(self) -> tuple[str, list]:
        """The WHERE clause over `lj` (the layer) and `j` (its latest attempt) and its
        parameters; `j` is only named with a display filter."""
        adapt = connection.ops.adapt_datetimefield_value
        events, event_params = any_sql("lj.event_type", self.events)
        clauses = ["lj.downstream_id = %s", "lj.placed_at >= %s", "lj.placed_at < %s", events]
        params = [self.backend_id, adapt(self.start), adapt(self.end), *event_params]
        if self.job_name is not None:
            clauses.append("lj.job_name = %s")
            params.append(self.job_name)
        if self.pr is not None:
            clauses.append("lj.pr_number = %s")
            params.append(self.pr)
        if self.display is not None:
            clauses.append(f"{DISPLAY} = %s")
            params += [*_display_params(self.now), self.display]
        return " AND ".join(clauses), params

    def joined(self) -> str:
        """The FROM clause `where` needs."""
        source = f"{_LAYER} lj"
        if self.display is None:
            return source
        return f"{source} JOIN {_JOBS} j ON j.id = lj.latest_job_id"


class Head(NamedTuple):
    """One matrix row: its key and its newest logical job's placement."""

    event_type: str
    pr_number: int
    head_sha: str
    placed_at: dt.datetime


class CellJob(NamedTuple):
    """The columns of a job row a matrix cell shows."""

    id: int
    workflow_name: str
    job_name: str
    run_attempt: int
    workflow_url: str
    artifact_url: str


class Cell(NamedTuple):
    """One matrix cell: its row's key, its column, the logical job's attempts and display
    status, and the latest attempt's columns a cell shows."""

    event_type: str
    pr_number: int
    head_sha: str
    workflow_name: str
    job_name: str
    attempts: int
    display: str
    job_id: int
    run_attempt: int
    workflow_url: str
    artifact_url: str


_HEADS = (
    "SELECT lj.event_type, lj.pr_number, lj.head_sha, MAX(lj.placed_at), COUNT(*) OVER ()"
    " FROM {source} WHERE {where} GROUP BY lj.event_type, lj.pr_number, lj.head_sha"
    " ORDER BY 4 DESC, 3, 1, 2 LIMIT %s OFFSET %s"
)
_COUNT = (
    "SELECT COUNT(*) FROM (SELECT 1 FROM {source} WHERE {where}"
    " GROUP BY lj.event_type, lj.pr_number, lj.head_sha) heads"
)


def heads(scope: Scope, page: int, page_size: int) -> tuple[list[Head], int, int]:
    """The rows of page `page` (kept within the pages there are), that page and the number of
    rows in all."""
    where, params = scope.where()
    source = scope.joined()
    page = max(page, 1)
    rows = statement_rows(
        _HEADS.format(source=source, where=where),
        [*params, page_size, (page - 1) * page_size],
    )
    if not rows and page > 1:  # past the last page: show the last one
        ((total,),) = statement_rows(_COUNT.format(source=source, where=where), params)
        if not total:
            return [], 1, 0
        return heads(scope, -(-total // page_size), page_size)
    total = rows[0][4] if rows else 0
    return [Head(event, pr, sha, _moment(at)) for event, pr, sha, at, _ in rows], page, total


_CELLS = (
    "SELECT lj.event_type, lj.pr_number, lj.head_sha, lj.workflow_name, lj.job_name,"
    f" lj.attempts, {DISPLAY}, j.id, j.run_attempt, j.workflow_url, j.artifact_url"
    f" FROM {_LAYER} lj JOIN {_JOBS} j ON j.id = lj.latest_job_id"
    " WHERE {where} AND {shas}"
)


def cells(scope: Scope, rows: Sequence[Head]) -> list[Cell]:
    """The cells of `rows` (those of `scope`'s logical jobs)."""
    if not rows:
        return []
    where, params = scope.where()
    shas, sha_params = any_sql("lj.head_sha", sorted({row.head_sha for row in rows}))
    found = statement_rows(
        _CELLS.format(where=where, shas=shas),
        [*_display_params(scope.now), *params, *sha_params],
    )
    keys = {row[:3] for row in rows}
    return [Cell(*row) for row in found if row[:3] in keys]


_JOB_NAMES = (
    f"SELECT DISTINCT job_name FROM {_LAYER}"
    " WHERE downstream_id = %s AND placed_at >= %s AND placed_at < %s"
)


def job_names(backend_id: int, start: dt.datetime, end: dt.datetime) -> list[str]:
    """The job names of a backend's logical jobs placed in [start, end), sorted."""
    adapt = connection.ops.adapt_datetimefield_value
    rows = statement_rows(_JOB_NAMES, [backend_id, adapt(start), adapt(end)])
    return sorted(name for (name,) in rows)


def _moment(value: dt.datetime | str) -> dt.datetime:
    """A MAX() of a datetime column: SQLite gives the text it stores (UTC)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return sql.aware(value)
