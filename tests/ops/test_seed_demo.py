"""`manage.py seed_demo`: the demo history, built once through the ingestion services."""

import io

import pytest
from django.core.management import call_command

from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Delivery, Dispatch, Downstream, GateEvaluation, Job, Level
from tests.support import builders

pytestmark = pytest.mark.django_db


def test_seed_demo_builds_the_history_once_with_a_progress_bar(frozen_clock, capsys):
    out = io.StringIO()
    call_command("seed_demo", stdout=out)

    assert "301 deliveries" in out.getvalue()
    bar = capsys.readouterr().err
    assert "demo history" in bar
    assert "100%" in bar
    backends = Downstream.objects.count()
    assert backends == 7  # six backend profiles and the relay probe (pytorch/crcr-test)
    deliveries = Delivery.objects.count()
    assert 290 <= deliveries <= 301  # at noon, the rest of today's deliveries are still to come
    assert Dispatch.objects.count() == deliveries * (backends - 1)  # each profile, not the L1 one
    probe = Job.objects.filter(downstream__full_name="pytorch/crcr-test").count()
    assert 0.9 * deliveries <= probe <= deliveries  # one relay-probe job per delivery answered
    assert 4_000 <= Job.objects.count() - probe <= 4_300
    assert Job.objects.filter(status=Job.Status.IN_PROGRESS).count() == 1  # the stuck job
    assert Job.objects.filter(closed_by_sweeper=True).count() == 1
    assert GateEvaluation.objects.count() > 0

    again = io.StringIO()
    call_command("seed_demo", "--no-progress", stdout=again)
    assert "nothing to do" in again.getvalue()
    assert Delivery.objects.count() == deliveries


def test_no_mirror_task_is_queued_while_check_runs_are_off(
    settings, inline_tasks, frozen_clock, django_capture_on_commit_callbacks
):
    settings.CRCR_CHECK_RUNS = False
    backend = builders.downstream("org/repo", level=Level.L3)
    builders.dispatch(builders.delivery(), backend)
    body = builders.callback_body("org/repo", status="completed", conclusion="success")

    with django_capture_on_commit_callbacks(execute=True):
        outcome = ingest.store(
            backend, parse_callback(body, "org/repo"), source=Job.Source.CALLBACK
        )

    assert outcome.status == "created"
    assert Job.objects.get().verified  # the kind of job that would be mirrored
    assert inline_tasks.ran == []
