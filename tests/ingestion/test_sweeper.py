"""The zombie sweeper, token pruning and `manage.py run_periodic`."""

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command

from hud import periodic
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Job, Level, UsedToken
from tests.conftest import NOW
from tests.support import builders

REPO = "org/repo"


@pytest.fixture
def backend(db):
    """An L2 backend."""
    return builders.downstream(REPO, Level.L2)


def report(
    backend, status: str = "in_progress", conclusion: str | None = None, **fields
) -> ingest.Outcome:
    """Store a live callback for `backend` at the clock's current time."""
    body = builders.callback_body(REPO, status=status, conclusion=conclusion, **fields)
    return ingest.store(backend, parse_callback(body, REPO), source=Job.Source.CALLBACK)


def run_periodic() -> str:
    """Run `manage.py run_periodic` once and return what it printed."""
    out = io.StringIO()
    call_command("run_periodic", stdout=out)
    return out.getvalue()


def test_job_in_progress_past_the_timeout_is_closed_as_timed_out(backend, frozen_clock, settings):
    started = report(backend)
    frozen_clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS + 1)

    closed = ingest.sweep_zombies()

    assert closed == 1
    job = Job.objects.get(id=started.job_id)
    assert job.status == Job.Status.COMPLETED
    assert job.conclusion == Job.Conclusion.TIMED_OUT
    assert job.closed_by_sweeper is True
    assert job.completed_received_at == frozen_clock()
    assert job.placed_at == NOW  # still where it started


def test_default_zombie_timeout_is_six_hours(settings):
    assert settings.CRCR_ZOMBIE_TIMEOUT_SECONDS == 6 * 3600


def test_sweeper_follows_the_configured_timeout(backend, frozen_clock, settings):
    settings.CRCR_ZOMBIE_TIMEOUT_SECONDS = 600
    report(backend)
    frozen_clock.advance(minutes=11)

    assert ingest.sweep_zombies() == 1
    assert Job.objects.get().closed_by_sweeper is True


def test_job_younger_than_the_timeout_is_left_alone(backend, frozen_clock, settings):
    report(backend)
    frozen_clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS)  # exactly at the limit

    assert ingest.sweep_zombies() == 0
    job = Job.objects.get()
    assert job.status == Job.Status.IN_PROGRESS
    assert job.conclusion == ""
    assert job.closed_by_sweeper is False


def test_completed_job_is_not_touched_by_the_sweeper(backend, frozen_clock, settings):
    report(backend, status="completed", conclusion="failure")
    before = Job.objects.get()
    frozen_clock.advance(days=2)

    assert ingest.sweep_zombies() == 0
    after = Job.objects.get()
    assert after.conclusion == "failure"
    assert after.closed_by_sweeper is False
    assert after.updated_at == before.updated_at
    assert after.completed_received_at == before.completed_received_at


def test_sweeper_closes_only_the_old_jobs_among_many(backend, frozen_clock, settings):
    report(backend, job_name="old")
    frozen_clock.advance(hours=5)
    report(backend, job_name="young")
    frozen_clock.advance(hours=1, seconds=1)

    assert ingest.sweep_zombies() == 1
    assert ingest.sweep_zombies() == 0  # a second pass finds nothing left
    statuses = dict(Job.objects.values_list("job_name", "status"))
    assert statuses == {"old": Job.Status.COMPLETED, "young": Job.Status.IN_PROGRESS}


def test_real_completed_callback_after_the_sweeper_replaces_its_close(
    backend, frozen_clock, settings
):
    started = report(backend)
    frozen_clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS + 60)
    ingest.sweep_zombies()
    frozen_clock.advance(minutes=30)

    outcome = report(backend, status="completed", conclusion="success")

    assert outcome == ingest.Outcome("updated", started.job_id)
    job = Job.objects.get()
    assert job.conclusion == "success"
    assert job.closed_by_sweeper is False
    assert job.completed_received_at == frozen_clock()
    assert job.placed_at == frozen_clock()
    # Once real, the result is final: the same result again is a duplicate.
    assert report(backend, status="completed", conclusion="success").status == "duplicate"


def test_real_timed_out_callback_after_the_sweeper_also_replaces_its_close(
    backend, frozen_clock, settings
):
    report(backend)
    frozen_clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS + 60)
    ingest.sweep_zombies()

    outcome = report(backend, status="completed", conclusion="timed_out")

    assert outcome.status == "updated"
    assert Job.objects.get().closed_by_sweeper is False


@pytest.mark.django_db
def test_relay_forward_after_the_sweeper_replaces_its_close(
    client, backend, frozen_clock, settings
):
    settings.HUD_BOT_KEY = "k"
    started = report(backend)
    frozen_clock.advance(hours=7)
    ingest.sweep_zombies()
    completed_at = (NOW + dt.timedelta(hours=6, minutes=30)).isoformat().replace("+00:00", "Z")
    callback = builders.callback_body(
        REPO, status="completed", conclusion="failure", completed_at=completed_at
    )

    response = client.post(
        "/api/crcr/results",
        data=json.dumps(builders.forward_body(callback, repo=REPO)),
        content_type="application/json",
        HTTP_X_HUD_INTERNAL_BOT="k",
    )

    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "status": "updated", "job": started.job_id}
    job = Job.objects.get()
    assert job.conclusion == "failure"
    assert job.closed_by_sweeper is False
    assert job.timing_source == Job.TimingSource.FORWARD


def test_late_in_progress_after_the_sweeper_is_stale(backend, frozen_clock, settings):
    report(backend)
    frozen_clock.advance(hours=7)
    ingest.sweep_zombies()

    assert report(backend).status == "stale"
    job = Job.objects.get()
    assert job.status == Job.Status.COMPLETED
    assert job.closed_by_sweeper is True


def test_run_periodic_runs_the_sweeper_and_prints_its_result(backend, frozen_clock):
    report(backend, job_name="a")
    report(backend, job_name="b")
    frozen_clock.advance(hours=7)

    output = run_periodic()

    assert "sweep_zombies: 2" in output.splitlines()
    assert Job.objects.filter(closed_by_sweeper=True).count() == 2
    assert "sweep_zombies: 0" in run_periodic().splitlines()


def test_run_periodic_prunes_expired_used_tokens(db, frozen_clock, settings):
    leeway = dt.timedelta(seconds=settings.CRCR_OIDC_LEEWAY_SECONDS)
    UsedToken.objects.create(jti="long-expired", expires_at=NOW - leeway - dt.timedelta(hours=1))
    UsedToken.objects.create(jti="within-leeway", expires_at=NOW - leeway / 2)
    UsedToken.objects.create(jti="still-valid", expires_at=NOW + dt.timedelta(minutes=5))

    output = run_periodic()

    assert "prune_used_tokens: 1" in output.splitlines()
    assert set(UsedToken.objects.values_list("jti", flat=True)) == {"within-leeway", "still-valid"}


def test_periodic_jobs_list_names_sweeper_and_pruning():
    assert set(periodic.PERIODIC_JOBS) >= {"sweep_zombies", "prune_used_tokens"}
