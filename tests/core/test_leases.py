"""hud.core.leases: a task redelivered after its worker died takes back the lease its run left."""

import pytest
from django.core.cache import cache

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
    leases.beat()  # this process is a live worker: its claims are held, not abandoned
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


def _gate_held_by_task_1(frozen_clock, running_as) -> GateCheck:
    """A gate claimed by task-1 five seconds ago, which task-2 cannot claim meanwhile."""
    gate = GateCheck.objects.create(head_sha="a" * 40, created_at=frozen_clock())
    running_as("task-1")
    assert sync._claim(GateCheck, gate.id, frozen_clock())
    frozen_clock.advance(seconds=5)
    running_as("task-2")
    assert not sync._claim(GateCheck, gate.id, frozen_clock())
    return gate


def test_a_redelivered_mirror_task_takes_back_the_lease_its_dead_run_left(frozen_clock, running_as):
    gate = _gate_held_by_task_1(frozen_clock, running_as)
    running_as(None)  # the reconciler's in-process run, or a test: no task id, no take-over
    assert not sync._claim(GateCheck, gate.id, frozen_clock())
    running_as("task-1")
    assert sync._claim(GateCheck, gate.id, frozen_clock())
    assert GateCheck.objects.get(id=gate.id).claimed_at == frozen_clock()


def _whole_worker_lost() -> None:
    """The host is gone or the worker SIGKILLed: its processes' heartbeats expire."""
    cache.delete(leases._heartbeat_key(leases._process()))


def test_a_claim_whose_process_is_gone_is_reconciled_and_taken_over(
    frozen_clock, running_as, settings
):
    settings.CRCR_DISPATCH_RECONCILE_AFTER_SECONDS = 1
    dispatch = _pending_dispatch()
    running_as("task-1")
    assert relay._claim(dispatch.id, frozen_clock())
    frozen_clock.advance(seconds=5)
    assert relay.reconcile() == 0  # its process is alive: the send is under way

    _whole_worker_lost()
    assert relay.reconcile() == 1  # back in the queue long before the lease runs out
    running_as("task-2")
    assert relay._claim(dispatch.id, frozen_clock())
    assert Dispatch.objects.get(id=dispatch.id).attempts == 2


def test_a_mirror_claim_whose_process_is_gone_is_taken_over(frozen_clock, running_as):
    gate = _gate_held_by_task_1(frozen_clock, running_as)

    _whole_worker_lost()
    assert sync._claim(GateCheck, gate.id, frozen_clock())
    leases.beat()  # the new holder's process is alive: its claim is not abandoned
    assert leases.abandoned("GateCheck", {gate.id: frozen_clock()}) == set()


def test_a_row_waiting_out_its_retry_delay_is_not_taken_early(frozen_clock, running_as, settings):
    settings.CRCR_DISPATCH_RECONCILE_AFTER_SECONDS = 1
    dispatch = _pending_dispatch()
    running_as("task-1")
    claimed_at = frozen_clock()
    assert relay._claim(dispatch.id, claimed_at)
    relay._finish(dispatch.id, claimed_at, reason="GitHub asked to retry later")
    _whole_worker_lost()  # after the attempt ended: the row now waits for its retry
    frozen_clock.advance(seconds=5)

    assert relay.reconcile() == 0
    running_as("task-2")
    assert not relay._claim(dispatch.id, frozen_clock())


def test_the_broker_never_hands_a_message_a_worker_still_holds_to_another(settings):
    """Redis redelivers after the visibility timeout: longer than any countdown plus any run."""
    longest_countdown = max(relay.retry_delay(99, 3600.0) for _ in range(200))
    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    assert visibility > longest_countdown + settings.CELERY_TASK_TIME_LIMIT
