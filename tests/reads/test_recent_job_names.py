"""`selectors.recent_job_names`, the L4 gate's expected jobs of every backend in one statement,
against the rule read attempt by attempt: the jobs of each backend's last N answered deliveries
of its event types in the window, other than the judged SHA's, verified attempts only."""

import datetime as dt

import pytest
from django.db import transaction
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hud.models import Job
from hud.reads import selectors
from tests.support import builders

NOW = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
SHA = "a" * 40
EVENTS = ("pull_request", "push", "nightly")

attempts = st.lists(
    st.fixed_dictionaries(
        {
            "backend": st.integers(0, 1),
            "delivery": st.integers(0, 7),
            "job_name": st.sampled_from(("build", "test", "lint")),
            "event_type": st.sampled_from(EVENTS),
            "sha": st.sampled_from((SHA, "b" * 40, "c" * 40)),
            "verified": st.booleans(),
            # Hours before NOW, ties included, some outside the window or after NOW.
            "hours_ago": st.sampled_from((-1, 0, 1, 1, 2, 5, 24, 24 * 13, 24 * 15)),
        }
    ),
    max_size=30,
)


def _attempt(delivery: int, hours_ago: int) -> dict:
    return {"backend": 0, "delivery": delivery, "job_name": "build", "event_type": "push",
            "sha": "b" * 40, "verified": True, "hours_ago": hours_ago}  # fmt: skip


def _reference(backend, event_types, since, until, runs) -> set[tuple[str, str]]:
    """The rule as it read before: newest attempts first, the first `runs` distinct
    deliveries, then every job of those deliveries."""
    recent = (
        Job.objects.filter(
            downstream_id=backend,
            event_type__in=event_types,
            verified=True,
            placed_at__gte=since,
            placed_at__lte=until,
        )
        .exclude(head_sha=SHA)
        .order_by("-placed_at", "-id")
        .values_list("delivery_id", flat=True)
    )
    deliveries = list(dict.fromkeys(recent))[:runs]
    return set(
        Job.objects.filter(downstream_id=backend, delivery_id__in=deliveries).values_list(
            "workflow_name", "job_name"
        )
    )


@pytest.mark.django_db
@settings(max_examples=60, deadline=None)
@given(attempts, st.integers(1, 4), st.sets(st.sampled_from(EVENTS), min_size=1))
# A delivery whose attempts span another's: it counts by its newest attempt.
@example([_attempt(0, 0), _attempt(1, 1), _attempt(0, 24)], 1, {"push"})
def test_the_names_of_each_backends_last_runs(rows, runs, event_types):
    with transaction.atomic():
        backends = [builders.downstream(f"org/{name}", 4) for name in "ab"]
        Job.objects.bulk_create(
            Job(
                downstream=backends[row["backend"]],
                delivery_id=f"d-{row['delivery']}",
                # A workflow per delivery: which deliveries were read shows in the names.
                workflow_name=f"w{row['delivery']}",
                job_name=row["job_name"],
                check_run_id=str(index),
                event_type=row["event_type"],
                head_sha=row["sha"],
                verified=row["verified"],
                source=Job.Source.CALLBACK,
                run_id=index,
                status=Job.Status.COMPLETED,
                conclusion="success",
                placed_at=NOW - dt.timedelta(hours=row["hours_ago"]),
                updated_at=NOW,
            )
            for index, row in enumerate(rows)
        )
        since = NOW - dt.timedelta(days=14)
        of = {backend.id: event_types for backend in backends}
        found = selectors.recent_job_names(of, SHA, since, NOW, runs)
        assert found == {
            backend.id: _reference(backend.id, event_types, since, NOW, runs)
            for backend in backends
        }
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_no_backend_reads_nothing(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert selectors.recent_job_names({}, SHA, NOW, NOW, 5) == {}
