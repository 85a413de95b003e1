"""Redis stopped mid-load (issue 9, reliability 2): ingestion keeps answering and storing, and
the check runs catch up through the reconciler once Redis is back.

The test starts its own `redis-server` on a free port (never the machine's 6379) and points
both the broker (CELERY_BROKER_URL) and the cache (CACHE_URL's TolerantRedisCache) at it, as
production does. Callbacks go through the real endpoint with real OIDC tokens; the fake GitHub
plays GitHub. No worker runs: `drain_celery_queue` pops what reached the broker and runs it.
"""

import json

import pytest
from django.core.cache import caches

from config.celery import app as celery_app
from hud import relay
from hud.checks import mirror
from hud.models import GateCheck, Job, Level
from tests.support import builders
from tests.support.redis_server import RedisServer, drain_celery_queue, needs_redis_server

pytestmark = [pytest.mark.fuzz, needs_redis_server, pytest.mark.django_db(transaction=True)]

BACKENDS = ("org4/repo4", "org5/repo5")
PRS = 4
JOBS = ("build", "test")


@pytest.fixture
def redis_server():
    """A private redis-server, killed at the end."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def on_redis(redis_server, settings, monkeypatch, fake_github, frozen_clock):
    """Broker and cache on the private Redis; check runs on; the app installed everywhere."""
    url = redis_server.url
    settings.CACHES = {
        "default": {
            "BACKEND": "config.cache.TolerantRedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "crcr-test",
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
    settings.CELERY_BROKER_URL = url
    settings.CRCR_CHECK_RUNS = True
    settings.CRCR_ONCALL_COMMENTS = False
    settings.CRCR_UPSTREAM_REPO = "pytorch/pytorch"
    settings.CRCR_RATE_LIMIT_PER_MIN = 100_000
    monkeypatch.setattr(celery_app.conf, "broker_url", url)
    monkeypatch.setattr(celery_app, "_pool", None)
    monkeypatch.setattr(celery_app.amqp, "_producer_pool", None)
    fake_github.sleep_clock = frozen_clock
    for name in BACKENDS:
        builders.downstream(name, Level.L4)
        fake_github.install(name)
    yield redis_server
    celery_app.pool.force_close_all()
    caches["default"].close()


def _prs() -> list[tuple[int, str, str]]:
    """PRs dispatched to every backend: (number, head SHA, delivery id)."""
    from hud.models import Downstream

    rows = []
    for number in range(1, PRS + 1):
        sha = f"{number:040x}"
        delivery = builders.delivery(f"redis-{number}", number=number, sha=sha)
        for backend in Downstream.objects.filter(full_name__in=BACKENDS):
            builders.dispatch(delivery, backend)
        rows.append((number, sha, delivery.delivery_id))
    return rows


def _conclusion(number: int, job: str, repo: str) -> str:
    return "failure" if (number + len(job) + len(repo)) % 3 == 0 else "success"


def _post(client, oidc, repo: str, pr: tuple[int, str, str], job: str, status: str):
    number, sha, delivery_id = pr
    body = builders.callback_body(
        repo,
        status=status,
        conclusion=_conclusion(number, job, repo) if status == "completed" else None,
        delivery_id=delivery_id,
        payload=builders.pr_payload(number, sha),
        run_id=number * 10 + JOBS.index(job),
        job_name=job,
    )
    return client.post(
        "/github/callback",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {oidc.mint(repo)}",
    )


def assert_converged(fake_github) -> dict[str, int]:
    """Every job and gate: exactly one check run on GitHub, showing the final state."""
    runs = [run for run in fake_github.check_runs_for("pytorch/pytorch")]
    keys = [(run["head_sha"], run["name"]) for run in runs]
    assert len(keys) == len(set(keys)), "duplicated check runs"
    by_key = dict(zip(keys, runs, strict=True))
    for job in Job.objects.select_related("downstream"):
        run = by_key.get((job.head_sha, mirror.check_run_name(job)))
        assert run is not None, f"no check run for job {job.id}"
        assert (run["status"], run["conclusion"]) == (job.status, job.conclusion), job.id
    for gate in GateCheck.objects.all():
        run = by_key[(gate.head_sha, mirror.GATE_NAME)]
        fields = mirror.gate_fields(mirror.gate_decision(gate.head_sha))
        assert (run["status"], run["conclusion"]) == (fields["status"], fields.get("conclusion"))
    return {"runs": len(runs), "jobs": Job.objects.count(), "gates": GateCheck.objects.count()}


def test_redis_stopped_ingestion_keeps_working_and_mirroring_catches_up(
    on_redis, client, oidc, fake_github, frozen_clock, caplog
):
    server = on_redis
    prs = _prs()
    client.raise_request_exception = False

    # Redis up: the first PR's jobs start, their mirror tasks go through the broker.
    for repo in BACKENDS:
        for job in JOBS:
            response = _post(client, oidc, repo, prs[0], job, "in_progress")
            assert response.status_code == 200, response.content
    ran = drain_celery_queue(server.url)
    assert ran.count("crcr.mirror_job") == len(BACKENDS) * len(JOBS)
    assert len(fake_github.check_runs) == len(BACKENDS) * len(JOBS) + 1  # + the gate

    # Redis stopped (SIGKILL): every callback is still answered 200 and stored.
    server.stop()
    answers = []
    for index, pr in enumerate(prs):
        statuses = ("completed",) if index == 0 else ("in_progress", "completed")
        for status in statuses:
            for repo in BACKENDS:
                for job in JOBS:
                    response = _post(client, oidc, repo, pr, job, status)
                    answers.append((response.status_code, response.json().get("status")))
        frozen_clock.advance(seconds=10)
    assert {code for code, _ in answers} == {200}, answers
    assert {status for _, status in answers} == {"created", "updated"}
    assert Job.objects.count() == PRS * len(BACKENDS) * len(JOBS)
    assert Job.objects.filter(status="completed").count() == Job.objects.count()
    assert any("could not enqueue task" in record.getMessage() for record in caplog.records)
    # Nothing reached GitHub meanwhile: the first PR's runs still show in_progress.
    assert {run["status"] for run in fake_github.check_runs.values()} == {"in_progress"}

    # Redis back (empty: no persistence). The reconciler re-sends through the broker.
    server.start()
    frozen_clock.advance(seconds=relay.lease_seconds() + 1)
    found = mirror.reconcile()
    assert found["check_runs"] == Job.objects.count()
    drain_celery_queue(server.url)
    frozen_clock.advance(seconds=relay.lease_seconds() + 1)
    mirror.reconcile()  # gates re-evaluated after the last job changed, if any are left
    drain_celery_queue(server.url)

    shape = assert_converged(fake_github)
    assert shape == {
        "runs": PRS * len(BACKENDS) * len(JOBS) + PRS,
        "jobs": PRS * len(BACKENDS) * len(JOBS),
        "gates": PRS,
    }
    frozen_clock.advance(seconds=relay.lease_seconds() + 1)
    assert not any(mirror.reconcile().values())  # quiet: nothing left to send
