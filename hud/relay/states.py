"""Expected results: which results each dispatched delivery should produce, and who answered.

`dispatch_states` gives, per (delivery, downstream), the dispatch and its `ResponseState` (a
silent L2+ backend becomes `no_response` after CRCR_NO_RESPONSE_AFTER); `liveness` counts per
backend what it answered over a window.
"""

import dataclasses
import datetime as dt
import enum
from collections.abc import Iterable

from django.db.models import Count, Q

from hud.core import clock
from hud.models import Delivery, Dispatch, Downstream, Job, Level
from hud.reads import selectors


class ResponseState(enum.StrEnum):
    """Whether a downstream answered a dispatch (CRCR.md, "L4 blocking": no response)."""

    PENDING = "pending"  # the dispatch is not sent yet (or is being retried)
    EXPECTED = "expected"  # sent to an L2+ backend; its callbacks may still come
    ANSWERED = "answered"  # at least one callback (job row) for this delivery
    NO_RESPONSE = "no_response"  # sent to L2+, nothing within CRCR_NO_RESPONSE_AFTER
    NOT_EXPECTED = "not_expected"  # L1 at dispatch: callbacks are ignored, nothing to expect
    UNDELIVERED = "undelivered"  # failed or app not installed: the backend never heard of it


@dataclasses.dataclass(frozen=True)
class DispatchState:
    """One (delivery, downstream) pair: the dispatch and whether results came back."""

    dispatch_id: int
    delivery_id: str
    event_type: str
    pr_number: int
    head_sha: str
    downstream_id: int
    downstream: str
    level_at_dispatch: int
    outcome: str
    attempts: int
    reason: str
    trimmed_fields: list[str]
    created_at: dt.datetime
    dispatched_at: dt.datetime | None
    jobs: int
    state: ResponseState
    no_response_at: dt.datetime | None


def response_state(
    dispatch: Dispatch, jobs: int, now: dt.datetime
) -> tuple[ResponseState, dt.datetime | None]:
    """The ResponseState of a dispatch that has `jobs` job rows, and when silence counts."""
    if jobs:
        return ResponseState.ANSWERED, None
    if dispatch.outcome in (Dispatch.Outcome.FAILED, Dispatch.Outcome.NOT_INSTALLED):
        return ResponseState.UNDELIVERED, None
    if dispatch.outcome == Dispatch.Outcome.PENDING or dispatch.dispatched_at is None:
        return ResponseState.PENDING, None
    if dispatch.level_at_dispatch < Level.L2:
        return ResponseState.NOT_EXPECTED, None
    deadline = dispatch.dispatched_at + selectors.no_response_after()
    return (ResponseState.NO_RESPONSE if now >= deadline else ResponseState.EXPECTED), deadline


def dispatch_states(
    deliveries: Iterable[Delivery | str] | None = None,
    *,
    head_sha: str | None = None,
    pr_number: int | None = None,
    downstream: Downstream | None = None,
    now: dt.datetime | None = None,
) -> list[DispatchState]:
    """Per (delivery, downstream): the dispatch and its ResponseState, newest delivery first.

    Select by deliveries (rows or GUIDs), by upstream head SHA, by PR number, or by
    downstream; filters combine. Two queries whatever the number of rows.
    """
    now = now or clock.now()
    queryset = Dispatch.objects.select_related("delivery", "downstream")
    if deliveries is not None:
        guids = [d.delivery_id if isinstance(d, Delivery) else str(d) for d in deliveries]
        queryset = queryset.filter(delivery__delivery_id__in=guids)
    if head_sha is not None:
        queryset = queryset.filter(delivery__head_sha=head_sha)
    if pr_number is not None:
        queryset = queryset.filter(delivery__pr_number=pr_number)
    if downstream is not None:
        queryset = queryset.filter(downstream=downstream)
    rows = list(queryset.order_by("-delivery__received_at", "delivery_id", "downstream__full_name"))
    counts = _job_counts(rows)
    states = []
    for row in rows:
        jobs = counts.get((row.downstream_id, row.delivery.delivery_id), 0)
        state, deadline = response_state(row, jobs, now)
        states.append(
            DispatchState(
                dispatch_id=row.id,
                delivery_id=row.delivery.delivery_id,
                event_type=row.delivery.event_type,
                pr_number=row.delivery.pr_number,
                head_sha=row.delivery.head_sha,
                downstream_id=row.downstream_id,
                downstream=row.downstream.full_name,
                level_at_dispatch=row.level_at_dispatch,
                outcome=row.outcome,
                attempts=row.attempts,
                reason=row.reason,
                trimmed_fields=list(row.trimmed_fields or []),
                created_at=row.created_at,
                dispatched_at=row.dispatched_at,
                jobs=jobs,
                state=state,
                no_response_at=deadline,
            )
        )
    return states


def _job_counts(rows: list[Dispatch]) -> dict[tuple[int, str], int]:
    if not rows:
        return {}
    guids = {row.delivery.delivery_id for row in rows}
    downstream_ids = {row.downstream_id for row in rows}
    counted = (
        Job.objects.filter(delivery_id__in=guids, downstream_id__in=downstream_ids)
        .values_list("downstream_id", "delivery_id")
        .annotate(n=Count("id"))
    )
    return {(downstream_id, guid): n for downstream_id, guid, n in counted}


@dataclasses.dataclass(frozen=True)
class Liveness:
    """How a backend answered what was dispatched to it at L2+ over a window."""

    downstream_id: int
    dispatched: int  # sent at L2+ within the window
    answered: int  # of those, with at least one callback
    no_response: int  # of those, silent past CRCR_NO_RESPONSE_AFTER
    awaiting: int  # of those, silent but still within CRCR_NO_RESPONSE_AFTER

    @property
    def answer_rate(self) -> float | None:
        """answered / (answered + no_response): settled dispatches only; None if none."""
        settled = self.answered + self.no_response
        return self.answered / settled if settled else None


def liveness(
    days: int = 7, *, downstream: Downstream | None = None, now: dt.datetime | None = None
) -> dict[int, Liveness]:
    """Per downstream id: L2+ dispatches sent in the last `days`, answered vs silent."""
    now = now or clock.now()
    silent_before = now - selectors.no_response_after()
    queryset = selectors.sent_to_l2_plus(now - dt.timedelta(days=days), now)
    if downstream is not None:
        queryset = queryset.filter(downstream=downstream)
    rows = queryset.values("downstream_id").annotate(
        dispatched=Count("id"),
        answered_n=Count("id", filter=Q(answered=True)),
        no_response=Count("id", filter=Q(answered=False, dispatched_at__lte=silent_before)),
        awaiting=Count("id", filter=Q(answered=False, dispatched_at__gt=silent_before)),
    )
    return {
        row["downstream_id"]: Liveness(
            downstream_id=row["downstream_id"],
            dispatched=row["dispatched"],
            answered=row["answered_n"],
            no_response=row["no_response"],
            awaiting=row["awaiting"],
        )
        for row in rows.order_by("downstream_id")
    }


def delivery_with_states(delivery_id: str) -> tuple[Delivery, list[DispatchState]] | None:
    """A delivery and its dispatch states for the delivery page; None if unknown."""
    delivery = Delivery.objects.filter(delivery_id=delivery_id).first()
    if delivery is None:
        return None
    return delivery, dispatch_states([delivery])
