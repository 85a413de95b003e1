"""The backend page's matrices: rows (PR head SHAs, commits) × job columns, one page at a time.

Columns are ordered builds first, then by name, pinned jobs before all; the compact layout
groups columns by the job name's prefix (`column_group`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hud.pages.common import Window
from hud.reads import matrix as reads_matrix
from hud.reads import selectors

MATRIX_PAGE_SIZE = 25
# The display statuses a matrix can be filtered by (`?conclusion=`).
MATRIX_CONCLUSIONS = (
    "success",
    "failure",
    "cancelled",
    "timed_out",
    "skipped",
    "neutral",
    "in_progress",
    "stuck",
)


@dataclass
class MatrixCell:
    """The latest attempt of one logical job: its row, display status and attempt count."""

    job: reads_matrix.CellJob
    status: str
    attempts: int


@dataclass
class MatrixRow:
    """One upstream PR head SHA or commit, with a cell per job column."""

    event_type: str
    pr_number: int
    head_sha: str
    placed_at: dt.datetime
    title: str = ""
    author: str = ""
    cells: list[MatrixCell | None] = field(default_factory=list)


@dataclass
class Matrix:
    """Rows (newest first) × job columns, one page of rows."""

    columns: list[tuple[str, str]]
    rows: list[MatrixRow]
    page: int
    pages: int
    total_rows: int
    pinned: int = 0  # the first `pinned` columns are the reader's pinned jobs

    @property
    def groups(self) -> list[dict[str, Any]]:
        """Runs of adjacent columns that share a group (`column_group`), for a header row."""
        groups: list[dict[str, Any]] = []
        for index, (_, job) in enumerate(self.columns):
            name = "pinned" if index < self.pinned else column_group(job)
            if groups and groups[-1]["name"] == name:
                groups[-1]["span"] += 1
            else:
                groups.append({"name": name, "span": 1})
        return groups


# The compact matrix is the default from this many job columns (`?compact=0|1` decides).
COMPACT_AUTO_COLUMNS = 10
# At most this many pinned jobs (`?pin=<job>`, repeatable).
MAX_PINS = 10
GROUP_SEPARATORS = ("-", "_", "/", ":", " ")


def column_group(job_name: str) -> str:
    """A job's group in the compact matrix: its name up to the first separator
    (`test-ops` and `test-nn` → `test`; `build` alone → `build`)."""
    cut = min((job_name.find(c) for c in GROUP_SEPARATORS if c in job_name), default=-1)
    return job_name[:cut] if cut > 0 else job_name


def compact_wanted(requested: bool | None, *matrices: Matrix) -> bool:
    """The compact mode: as the reader asked, else on when a matrix has many job columns."""
    if requested is not None:
        return requested
    return any(len(m.columns) >= COMPACT_AUTO_COLUMNS for m in matrices)


@dataclass(frozen=True)
class MatrixFilters:
    """Filters of the backend page's matrices (all optional)."""

    event_type: str | None = None
    job_name: str | None = None
    conclusion: str | None = None
    pr: int | None = None


def matrix(
    backend_id: int,
    events: Iterable[str],
    filters: MatrixFilters,
    window: Window,
    now: dt.datetime,
    page: int,
    page_size: int = MATRIX_PAGE_SIZE,
    pins: tuple[str, ...] = (),
) -> Matrix:
    """Lay a backend's latest attempts of `events` in the window out as rows × job columns,
    one page, read in SQL (`hud.reads.matrix`: newest row first).

    Columns of pinned job names come first (in pin order), then builds, then by name.
    """
    events = [e for e in events if filters.event_type in (None, e)]
    if not events:
        return Matrix([], [], 1, 1, 0)
    scope = reads_matrix.Scope(
        backend_id, events, window.start, window.end, now,
        job_name=filters.job_name, pr=filters.pr, display=filters.conclusion,
    )  # fmt: skip
    heads, page, total = reads_matrix.heads(scope, page, page_size)
    if not heads:
        return Matrix([], [], 1, 1, 0)
    shown = reads_matrix.cells(scope, heads)
    columns = sorted({(c.workflow_name, c.job_name) for c in shown}, key=column_order)
    pinned = sorted((c for c in columns if c[1] in pins), key=lambda c: (pins.index(c[1]), c))
    columns = pinned + [c for c in columns if c not in pinned]
    details = selectors.pr_details([head.pr_number for head in heads])
    by_row: dict[tuple, dict[tuple[str, str], MatrixCell]] = {}
    for c in shown:
        job = reads_matrix.CellJob(
            c.job_id, c.workflow_name, c.job_name, c.run_attempt, c.workflow_url, c.artifact_url
        )
        cell = MatrixCell(job, c.display, c.attempts)
        by_row.setdefault(c[:3], {})[(c.workflow_name, c.job_name)] = cell
    rows = []
    for head in heads:
        row_cells = by_row.get(head[:3], {})
        detail = details.get(head.pr_number, {})
        rows.append(
            MatrixRow(
                event_type=head.event_type,
                pr_number=head.pr_number,
                head_sha=head.head_sha,
                placed_at=head.placed_at,
                title=detail.get("title", ""),
                author=detail.get("author", ""),
                cells=[row_cells.get(column) for column in columns],
            )
        )
    return Matrix(columns, rows, page, max(1, math.ceil(total / page_size)), total, len(pinned))


def column_order(column: tuple[str, str]) -> tuple[bool, str, str]:
    # Builds first, then alphabetical: the order a maintainer reads a workflow in.
    workflow, job = column
    return (not job.startswith("build"), job, workflow)
