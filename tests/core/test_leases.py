"""hud.core.leases: a task redelivered after its worker died takes back the lease its run left."""

import pytest

from hud import relay
from hud.checks import sync
from hud.core import leases
from hud.models import Dispatch, GateCheck
from tests.support import builders

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_as(settings):
    """Run as a given Celery task id (what config.celery binds before each task)."""
    settings.GITHUB_TIMEOUT = 0  # no request of the dead run to wait out here
    token = leases.current_task_id.set(None)
    yield leases.current_task_id.set
    leases.current_task_id.reset(token)


def _pending_dispatch() -> Dispatch:
    dispatch = builders.dispatch(builders.delivery(), builders.downstream())
    Dispatch.objects.filter(id=dispatch.id).update(
        outcome=Dispatch.Outcome.PENDING, dispatched_at=None, attempts=0
    )
    return dispatch


def test_a_redelivered_dispatch_task_takes_back_the_lease_its_dead_run_left(
    frozen_clock, running_as
):
    dispatch = _pending_dispatch()
    running_as("task-1")
    assert relay._claim(dispatch.id, frozen_clock())  # ... and its worker dies
    frozen_clock.advance(seconds=5)

    running_as("task-2")
    assert not relay._claim(dispatch.id, frozen_clock())  # another task waits for the lease
    running_as("task-1")
    assert relay._claim(dispatch.id, frozen_clock())  # the same message, delivered again
    assert Dispatch.objects.get(id=dispatch.id).attempts == 2


def test_a_redelivered_mirror_task_takes_back_the_lease_its_dead_run_left(frozen_clock, running_as):
    gate = GateCheck.objects.create(head_sha="a" * 40, created_at=frozen_clock())
    running_as("task-1")
    assert sync._claim(GateCheck, gate.id, frozen_clock())
    frozen_clock.advance(seconds=5)

    running_as("task-2")
    assert not sync._claim(GateCheck, gate.id, frozen_clock())
    running_as(None)  # the reconciler's in-process run, or a test: no task id, no take-over
    assert not sync._claim(GateCheck, gate.id, frozen_clock())
    running_as("task-1")
    assert sync._claim(GateCheck, gate.id, frozen_clock())
    assert GateCheck.objects.get(id=gate.id).claimed_at == frozen_clock()


def test_the_broker_never_hands_a_message_a_worker_still_holds_to_another(settings):
    """Redis redelivers after the visibility timeout: longer than any countdown plus any run."""
    longest_countdown = max(relay.retry_delay(99, 3600.0) for _ in range(200))
    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    assert visibility > longest_countdown + settings.CELERY_TASK_TIME_LIMIT
