"""What a backend's gate evaluation reads: its recent jobs as of a moment, from the derived layer.

Most logical jobs are a single attempt row, and then their `LogicalJob` row *is* that attempt
with its outcome class: those are read from the layer and never grouped again
(`stats.prepare_single_rows`). The attempts themselves are read, and prepared by `hud.stats`,
only for the logical jobs the layer cannot describe as of `as_of`:

- jobs with another attempt row (re-runs, matrix legs), and jobs with any row placed at or
  after `as_of`, which the layer has already taken in;
- jobs the layer classes as superseded (the superseding push may come after `as_of`);
- jobs whose latest attempt the layer holds open for a leg that was placed before the span
  (its latest row in the span completed): the span's rows alone do not show that leg;
- every job of the PRs of those (the universe supersession is judged on).

Together they are exactly what `stats.prepare` makes of the attempt frame as of `as_of`
(`tests/promotion/test_gate_layer.py` proves it on simulated histories). Admins' exclusions
take out whole logical jobs first.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd
from django.db.models import Exists, OuterRef, Q

from hud import stats
from hud.models import Downstream, GateExclusion, Job, LogicalJob
from hud.reads.rows import driver_rows
from hud.reads.selectors import FRAME_COLUMNS, FRAME_MARGIN, FRAME_NAMES

# A logical job within one backend.
KEY = ["event_type", "head_sha", "workflow_name", "job_name"]
# The layer's row, and its latest attempt's row through the join (whose own columns the frame
# reads, as `selectors.jobs_frame` does).
_LAYER_COLUMNS = [
    *(f"latest_job__{column}" for column in FRAME_COLUMNS if column != "downstream__full_name"),
    "outcome",
    "first_pr_number",
    "latest_status",
]


@dataclass(frozen=True)
class GateJobs:
    """A backend's jobs placed in [since − margin, as_of), as the gate counts them."""

    prepared: stats.PreparedJobs  # as `stats.prepare` makes them; exclusions left out
    attempts: pd.DataFrame  # the attempt rows of every job with more than one (a jobs frame)
    excluded_attempts: list[int]  # per exclusion, in order: the attempts it took out


def gate_jobs(
    downstream: Downstream,
    exclusions: Sequence[GateExclusion],
    since: dt.datetime,
    as_of: dt.datetime,
) -> GateJobs:
    """The jobs of `downstream` placed in [since − margin, as_of) (`selectors.jobs_frame`'s
    span), prepared as of `as_of`, without the logical jobs `exclusions` take out."""
    return gate_jobs_of([(downstream, exclusions)], since, as_of)[downstream.id]


def gate_jobs_of(
    backends: Sequence[tuple[Downstream, Sequence[GateExclusion]]],
    since: dt.datetime,
    as_of: dt.datetime,
) -> dict[int, GateJobs]:
    """`gate_jobs` of each backend (with its exclusions), by id: the rows the layer cannot
    describe as of `as_of` are found for every backend in one query.

    Each backend's layer rows are read by their own query: one `downstream IN (...)` read of
    ten backends' month had PostgreSQL hash all of `hud_job` (0.3 s at 1M jobs, against
    10 × 24 ms; docs/performance.md), and its frame would type each backend's columns from
    the others' values."""
    earlier: dict[int, list[tuple[str, int]]] = defaultdict(list)
    ids = [downstream.id for downstream, _ in backends]
    for backend, sha, pr in _earlier_rows(ids, _span(ids, since, as_of), as_of):
        earlier[backend].append((sha, pr))
    out = {}
    for downstream, exclusions in backends:
        span = _span([downstream.id], since, as_of)
        # The layer's own `placed_at` (its latest attempt's) selects through its (downstream,
        # placed_at) index; the joined attempt's would scan every logical job of the backend.
        layer = _layer_frame(LogicalJob.objects.filter(span), downstream)
        out[downstream.id] = _jobs_of(exclusions, span, layer, earlier[downstream.id])
    return out


def _span(ids: Sequence[int], since: dt.datetime, as_of: dt.datetime) -> Q:
    return Q(downstream_id__in=ids, placed_at__gte=since - FRAME_MARGIN, placed_at__lt=as_of)


def _jobs_of(
    exclusions: Sequence[GateExclusion],
    span: Q,
    layer: pd.DataFrame,
    earlier: list[tuple[str, int]],
) -> GateJobs:
    """One backend's `GateJobs` from its layer rows and earlier rows (`_earlier_rows`) in
    `span`."""
    excluded, taken = _excluded_keys(span, exclusions)
    # A latest row whose own status is not its job's: another leg of its attempt is still open.
    # Placed in the span, that leg is an earlier row already; placed before it, only the
    # attempt rows the span holds say what the window shows (found by the hypothesis test of
    # tests/promotion/test_gate_layer.py: a leg left in progress for 18 days).
    rederived = (layer["outcome"] == stats.SUPERSEDED) | (layer["latest_status"] != layer["status"])
    attempts = _attempt_frame(span, earlier, layer[rederived])
    attempts = attempts[~_has_key(attempts, excluded)]
    single = layer[~_has_key(layer, excluded | _keys(attempts))]
    parts = [stats.prepare_single_rows(single, single["outcome"])]
    if not attempts.empty:
        parts.append(stats.prepare(attempts))
    return GateJobs(stats.combine_prepared(parts), attempts, taken)


def _layer_frame(queryset, downstream: Downstream) -> pd.DataFrame:
    # As the driver gives them: `stats.rows_frame` types the columns (SQLite's naive times are
    # the UTC Django stores), so Django's per-value converters would be paid twice.
    rows = driver_rows(queryset.values_list(*_LAYER_COLUMNS))
    columns = [column.removeprefix("latest_job__") for column in _LAYER_COLUMNS]
    return stats.rows_frame(rows, columns, downstream=downstream.full_name)


def _earlier_rows(ids: Sequence[int], span: Q, as_of: dt.datetime) -> list[tuple[int, str, int]]:
    """(backend id, head SHA, PR number) of the rows of `span` (over the backends `ids`) whose
    logical job the layer cannot describe as of `as_of`: rows that are not their logical
    job's latest (re-runs and legs), and rows of a logical job with another row placed at or
    after `as_of`, which the layer has taken in whichever row it names latest (a later leg
    still in progress leaves the earlier leg the latest row, yet opens its attempt). Bounded
    by the span, however far back `as_of` is."""
    latest = LogicalJob.objects.filter(latest_job_id=OuterRef("id"))
    # Two selects under one UNION: ORed, PostgreSQL hashed every LogicalJob's latest id
    # (102,200 at 100k jobs, 25 ms) instead of probing the index per span row. The rows that
    # are not latest are found by id first: the span's ids alone are in the (downstream,
    # placed_at, id) index, so PostgreSQL reads them from it, where for whole rows it could
    # walk `job_time` across every backend's span (at 1M jobs, 25,800 rows for 514: 10.7 ms
    # against 1.4).
    columns = ("downstream_id", "head_sha", "pr_number")
    not_latest_ids = Job.objects.filter(span).filter(~Exists(latest)).values("id")
    not_latest = Job.objects.filter(id__in=not_latest_ids).values_list(*columns)
    # As of now (every page) no row is placed later: one probe of the (downstream, placed_at)
    # index spares the correlated select, a third of this read on the demo's backend page.
    if not Job.objects.filter(downstream_id__in=ids, placed_at__gte=as_of).exists():
        return list(not_latest)
    later = Job.objects.filter(
        **{column: OuterRef(column) for column in ("downstream_id", *KEY)}, placed_at__gte=as_of
    )
    with_later = Job.objects.filter(span).filter(Exists(later)).values_list(*columns)
    return list(not_latest.union(with_later))


def _attempt_frame(span: Q, earlier: list[tuple[str, int]], layer: pd.DataFrame) -> pd.DataFrame:
    """Every row in the span of the SHAs given (`earlier`'s and the `layer` rows') and of the
    PRs they belong to, as a jobs frame."""
    shas = {sha for sha, _ in earlier} | set(layer["head_sha"])
    prs = {pr for _, pr in earlier}
    prs |= set(layer["pr_number"]) | set(layer["first_pr_number"])
    prs.discard(0)
    if not shas:
        return stats.empty_jobs_frame()
    pr_shas = Job.objects.filter(span, pr_number__in=prs).values("head_sha")
    rows = driver_rows(
        Job.objects.filter(span)
        .filter(Q(head_sha__in=shas) | Q(head_sha__in=pr_shas))
        .values_list(*FRAME_COLUMNS)
    )
    return stats.rows_frame(rows, FRAME_NAMES)


def _key_tuples(frame: pd.DataFrame) -> Iterable[tuple]:
    return zip(*(frame[column].to_numpy() for column in KEY), strict=True)


def _keys(frame: pd.DataFrame) -> set[tuple]:
    return set(_key_tuples(frame))


def _has_key(frame: pd.DataFrame, keys: set[tuple]) -> pd.Series:
    # A set look-up per row: a MultiIndex of the frame cost more than the rows it tests.
    if not keys or frame.empty:
        return pd.Series(False, index=frame.index)
    return pd.Series([key in keys for key in _key_tuples(frame)], index=frame.index, dtype=bool)


def _excluded_keys(span: Q, exclusions: Iterable[GateExclusion]) -> tuple[set[tuple], list[int]]:
    """The logical jobs the exclusions take out of the span, and how many of its attempts each
    took out (an earlier exclusion's are not counted again).

    An exclusion takes out whole logical jobs, every attempt: the one job it names, or every
    job with an attempt placed in its window. Dropping only the named attempt would make an
    earlier attempt the latest, and its failure would count again.
    """
    keys: set[tuple] = set()
    gone: set[int] = set()
    taken = []
    for item in exclusions:
        if item.job_id is not None:
            named = Job.objects.filter(span, id=item.job_id)
        else:
            named = Job.objects.filter(span, placed_at__gte=item.start, placed_at__lt=item.end)
        hit = set(named.values_list(*KEY).distinct())
        shas = {key[1] for key in hit}
        ids = {
            row[0]
            for row in Job.objects.filter(span, head_sha__in=shas).values_list("id", *KEY)
            if row[1:] in hit
        }
        taken.append(len(ids - gone))
        keys |= hit
        gone |= ids
    return keys, taken
