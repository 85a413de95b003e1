"""The backend page's matrices: rows (PR head SHAs, commits) × job columns, one page at a time.

Columns are ordered builds first, then by name, pinned jobs before all; the compact layout
groups columns by the job name's prefix (`column_group`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hud.pages.common import Window
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

    job: selectors.CellJob
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
    latest: pd.DataFrame,
    events: Iterable[str],
    filters: MatrixFilters,
    window: Window,
    page: int,
    page_size: int = MATRIX_PAGE_SIZE,
    pins: tuple[str, ...] = (),
) -> Matrix:
    """Lay latest attempts of `events` in the window out as rows × job columns, one page.

    Columns of pinned job names come first (in pin order), then builds, then by name.
    """
    event_type = latest["event_type"].to_numpy()
    placed_at = latest["placed_at"]
    wanted = (
        np.isin(event_type, list(events))
        & (placed_at >= pd.Timestamp(window.start)).to_numpy()
        & (placed_at < pd.Timestamp(window.end)).to_numpy()
    )
    if filters.event_type:
        wanted &= event_type == filters.event_type
    if filters.job_name:
        wanted &= latest["job_name"].to_numpy() == filters.job_name
    if filters.pr is not None:
        wanted &= latest["pr_number"].to_numpy() == filters.pr
    if filters.conclusion:
        wanted &= latest["display"].to_numpy() == filters.conclusion
    # One selection of the columns a cell reads: filtering the whole frame step by step copied
    # its ~20 columns each time.
    cells = latest.loc[wanted, _CELL_COLUMNS]
    if cells.empty:
        return Matrix([], [], 1, 1, 0)
    heads = _newest_first(cells)
    total = len(heads)
    pages = max(1, math.ceil(total / page_size))
    page = min(max(page, 1), pages)
    heads = heads[(page - 1) * page_size : page * page_size]
    on_page = {key for key, _ in heads}
    shown = cells[[key in on_page for key in _row_keys(cells)]]
    columns = sorted(
        set(zip(shown["workflow_name"], shown["job_name"], strict=True)), key=column_order
    )
    pinned = sorted((c for c in columns if c[1] in pins), key=lambda c: (pins.index(c[1]), c))
    columns = pinned + [c for c in columns if c not in pinned]
    jobs = selectors.cell_jobs(shown["id"].astype(int).tolist())
    details = selectors.pr_details([pr for (_, pr, _), _ in heads])
    by_row: dict[tuple, dict[tuple[str, str], MatrixCell]] = {}
    # The columns a cell needs, zipped: itertuples of the whole frame boxed every column.
    fields = ("event_type", "pr_number", "head_sha", "workflow_name", "job_name", "id")
    for event, pr, sha, workflow, job, job_id, display, attempts in zip(
        *(shown[column].tolist() for column in (*fields, "display", "attempts")), strict=True
    ):
        cell = MatrixCell(jobs[job_id], display, attempts)
        by_row.setdefault((event, pr, sha), {})[(workflow, job)] = cell
    rows = []
    for (event, pr, sha), placed_at in heads:
        row_cells = by_row.get((event, pr, sha), {})
        rows.append(
            MatrixRow(
                event_type=event,
                pr_number=pr,
                head_sha=sha,
                placed_at=pd.Timestamp(placed_at, tz="UTC").to_pydatetime(),
                title=details.get(pr, {}).get("title", ""),
                author=details.get(pr, {}).get("author", ""),
                cells=[row_cells.get(column) for column in columns],
            )
        )
    return Matrix(columns, rows, page, pages, total, len(pinned))


# What `matrix` reads of a latest attempt.
_CELL_COLUMNS = ["event_type", "pr_number", "head_sha", "workflow_name", "job_name", "id",
                 "display", "attempts", "placed_at"]  # fmt: skip


def _row_keys(cells: pd.DataFrame) -> Iterator[tuple[str, int, str]]:
    """Each cell's row: (event type, PR number, head SHA), as Python values."""
    columns = ("event_type", "pr_number", "head_sha")
    return zip(*(cells[column].tolist() for column in columns), strict=True)


def _newest_first(cells: pd.DataFrame) -> list[tuple[tuple[str, int, str], int]]:
    """Each row of `cells` with its newest cell's placed_at (ns since the epoch), newest first,
    then by head SHA, else in the order rows first appear.

    A dict over the rows: pandas' groupby, reset_index and sort cost a backend page's two
    matrices 6 ms for its few hundred cells."""
    newest: dict[tuple[str, int, str], int] = {}
    placed = cells["placed_at"].astype("int64").tolist()
    for key, at in zip(_row_keys(cells), placed, strict=True):
        if at > newest.get(key, at - 1):
            newest[key] = at
    return sorted(newest.items(), key=lambda item: (-item[1], item[0][2]))


def column_order(column: tuple[str, str]) -> tuple[bool, str, str]:
    # Builds first, then alphabetical: the order a maintainer reads a workflow in.
    workflow, job = column
    return (not job.startswith("build"), job, workflow)
