"""Latest attempts of logical jobs read from the derived layer (`hud_logicaljob`).

The rows come shaped as `hud.stats.prepare(...).latest` (the `hud.stats` jobs-frame columns,
`attempts` and `outcome`), with `row_status`: the status of the latest attempt's own row,
which `stats.is_stuck` judges. No attempt is classified per request: the class and the latest
attempt (its worst leg) were derived when the attempt was stored.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from django.db.models import OuterRef, Q, QuerySet, Subquery

from hud import stats
from hud.models import Downstream, Job, LogicalJob
from hud.reads.rows import driver_rows

# (frame column, LogicalJob path) in `hud.stats.JOB_COLUMNS` order, then the extras.
_COLUMNS = (
    ("id", "latest_job_id"),
    ("downstream", "downstream__full_name"),
    ("event_type", "event_type"),
    ("pr_number", "pr_number"),
    ("head_sha", "head_sha"),
    ("workflow_name", "workflow_name"),
    ("job_name", "job_name"),
    ("run_id", "latest_job__run_id"),
    ("run_attempt", "latest_job__run_attempt"),
    ("status", "latest_status"),
    ("conclusion", "latest_conclusion"),
    ("placed_at", "placed_at"),
    ("in_progress_received_at", "latest_job__in_progress_received_at"),
    ("queue_seconds", "queue_seconds"),
    ("execution_seconds", "execution_seconds"),
    ("closed_by_sweeper", "closed_by_sweeper"),
    ("ref", "ref"),
)
_EXTRAS = (
    ("attempts", "attempts"),
    ("outcome", "outcome"),
    ("row_status", "latest_job__status"),
    ("downstream_id", "downstream_id"),
)


# The extras' types (`_EXTRAS`), which an empty read cannot infer.
_EXTRA_TYPES = {
    "attempts": "int64", "outcome": object, "row_status": object, "downstream_id": "int64",
}  # fmt: skip


def latest_frame(rows: QuerySet[LogicalJob]) -> pd.DataFrame:
    """The logical jobs of `rows` as a latest-attempts frame, ordered by logical job key."""
    columns = [*_COLUMNS, *_EXTRAS]
    order = ["downstream__full_name", *stats.LOGICAL_JOB_KEY[1:]]
    # Typed once, by `stats.rows_frame`, not first by Django's converters value by value.
    records = driver_rows(rows.order_by(*order).values_list(*(path for _, path in columns)))
    frame = stats.rows_frame(records, [name for name, _ in columns])
    # Typed as read unless there were no rows to infer from: casting a frame copies it whole.
    retype = {c: t for c, t in _EXTRA_TYPES.items() if frame[c].dtype != np.dtype(t)}
    return frame.astype(retype) if retype else frame


def newest_nightlies(downstream_ids: list[int], events: tuple[str, ...]) -> dict[int, pd.DataFrame]:
    """Each backend's newest nightly/periodic run: the latest attempt of each of its jobs.

    The newest run is the head SHA of the backend's most recently placed attempt of `events`
    (two queries whatever the number of backends or jobs).
    """
    newest = (
        Job.objects.filter(downstream=OuterRef("pk"), event_type__in=events)
        .order_by("-placed_at", "-id")
        .values("head_sha")[:1]
    )
    pairs = (
        Downstream.objects.filter(id__in=downstream_ids)
        .annotate(nightly_sha=Subquery(newest))
        .values_list("id", "nightly_sha")
    )
    condition = Q()
    for downstream_id, sha in pairs:
        if sha:
            condition |= Q(downstream_id=downstream_id, head_sha=sha)
    if not condition:
        return {}
    frame = latest_frame(LogicalJob.objects.filter(condition, event_type__in=events))
    return {int(key): part for key, part in frame.groupby("downstream_id", sort=False)}
