"""`selectors.on_shas`: the rows of exactly the (backend, event type, head SHA) keys asked for,
whichever backends share their SHAs (they share one term of the statement)."""

import pytest
from django.core.management import call_command
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from hud.models import Downstream, Job, LogicalJob
from hud.reads import selectors
from tests.api.test_exports import add_jobs
from tests.support import builders

EVENTS = ("pull_request", "push")
SHAS = tuple(f"{n:040x}" for n in range(4))


def _stored() -> list[Downstream]:
    """Three backends' attempts and logical jobs: two over every event type and three SHAs, the
    third on a fourth SHA only."""
    backends = [builders.downstream(f"org/{name}") for name in "abc"]
    add_jobs(backends[:2], 24)
    add_jobs([backends[2], backends[2]], 4, start=100)
    for index, job in enumerate(Job.objects.order_by("id")):
        job.event_type = EVENTS[index // 2 % 2]
        job.head_sha = SHAS[3] if job.downstream_id == backends[2].id else SHAS[index % 3]
        job.save(update_fields=["event_type", "head_sha"])
    call_command("rebuild_derived", verbosity=0)
    return backends


keys = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(EVENTS), st.sampled_from(SHAS)), max_size=12
)


@pytest.mark.django_db
@settings(max_examples=40, deadline=None)
@given(keys)
def test_the_rows_of_exactly_the_keys_asked_for(picked):
    with transaction.atomic():
        backends = _stored()
        ids = [backend.id for backend in backends] + [10**9]  # and a backend with no rows
        wanted = {(ids[backend], event_type, sha) for backend, event_type, sha in picked}
        for model in (Job, LogicalJob):
            selected = set(model.objects.filter(selectors.on_shas(wanted)).values_list("id"))
            expected = {
                (row[0],)
                for row in model.objects.values_list(
                    "id", "downstream_id", "event_type", "head_sha"
                )
                if tuple(row[1:]) in wanted
            }
            assert selected == expected
        transaction.set_rollback(True)
