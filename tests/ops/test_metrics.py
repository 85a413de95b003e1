"""GET /metrics: answer and ingestion counters, scrape-time gauges, queue depth, the token."""

import datetime as dt
import json
import shutil
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from hud.checks import mirror
from hud.core import taskqueue
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import (
    CheckRunMirror,
    Dispatch,
    GateCheck,
    Job,
    Level,
    Notification,
    OncallComment,
    RerunRequest,
)
from hud.ops import metrics
from tests.checks.conftest import L4, env  # noqa: F401  (the mirror's fixture, by name)
from tests.ops.conftest import metric, scrape
from tests.support import builders
from tests.support.fake_github import Canned

pytestmark = pytest.mark.django_db
REPO = "org/repo"


def post_callback(client, oidc, body, repository=REPO, **headers):
    """A callback as the public action sends it."""
    return client.post(
        "/github/callback",
        json.dumps(body),
        content_type="application/json",
        **{**oidc.headers(repository), **headers},
    )


def test_metrics_is_prometheus_text_with_counters_and_gauges(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    for name in (
        "# TYPE crcr_http_responses_total counter",
        "# TYPE crcr_ingest_total counter",
        "crcr_jobs_in_progress",
        "crcr_dispatches_pending",
        "crcr_dispatch_oldest_pending_age_seconds",
        "crcr_sweeper_closed_jobs_24h",
        'crcr_reconciler_lag_seconds{queue="check_run"}',
        'crcr_reconciler_backlog{queue="notification"}',
        'crcr_mirror_failing{kind="gate",state="given_up"}',
        'crcr_task_queue_depth{backend="inprocess"}',
        "crcr_database_up 1.0",
    ):
        assert name in text


def test_ingest_outcomes_and_answer_codes_are_counted(client, oidc, frozen_clock):
    builders.downstream(REPO, Level.L2)
    before = scrape(client)
    assert post_callback(client, oidc, builders.callback_body()).json()["status"] == "created"
    assert post_callback(client, oidc, builders.callback_body()).json()["status"] == "duplicate"
    assert post_callback(client, oidc, builders.callback_body(), "org/unknown").status_code == 403
    bad = client.post("/github/callback", "{}", content_type="application/json")
    assert bad.status_code == 401
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert delta("crcr_ingest_total", endpoint="callback", outcome="created") == 1
    assert delta("crcr_ingest_total", endpoint="callback", outcome="duplicate") == 1
    assert delta("crcr_ingest_total", endpoint="callback", outcome="not_allowlisted") == 1
    assert delta("crcr_ingest_total", endpoint="callback", outcome="invalid_token") == 1
    assert delta("crcr_http_responses_total", route="github/callback", code="200") == 2
    assert delta("crcr_http_responses_total", route="github/callback", code="403") == 1
    assert delta("crcr_http_responses_total", route="github/callback", code="401") == 1
    # The first scrape itself was answered and counted as well.
    assert delta("crcr_http_responses_total", route="metrics", method="GET", code="200") == 1


def test_forward_and_unmatched_routes_are_counted(client, settings):
    settings.HUD_BOT_KEY = "k"
    before = scrape(client)
    client.post("/api/crcr/results", "{}", content_type="application/json")
    client.get("/no/such/page")
    after = scrape(client)
    outcome = {"endpoint": "forward", "outcome": "invalid_bot_key"}
    assert (
        metric(after, "crcr_ingest_total", **outcome)
        - metric(before, "crcr_ingest_total", **outcome)
        == 1
    )
    unmatched = {"route": "unmatched", "code": "404"}
    assert metric(after, "crcr_http_responses_total", **unmatched) > metric(
        before, "crcr_http_responses_total", **unmatched
    )


def test_state_gauges_are_read_from_the_database_at_scrape_time(client, frozen_clock, settings):
    backend = builders.downstream(REPO, Level.L2)
    delivery = builders.delivery()
    Dispatch.objects.create(
        delivery=delivery,
        downstream=backend,
        level_at_dispatch=2,
        created_at=frozen_clock() - dt.timedelta(minutes=10),
    )
    for run in (1, 2, 3):
        body = builders.callback_body(run_id=run, job_name=f"job-{run}")
        ingest.store(backend, parse_callback(body, REPO), source=Job.Source.CALLBACK)
    text = scrape(client)
    assert metric(text, "crcr_jobs_in_progress") == 3
    assert metric(text, "crcr_dispatches_pending") == 1
    assert metric(text, "crcr_dispatch_oldest_pending_age_seconds") == 600
    assert metric(text, "crcr_sweeper_closed_jobs_24h") == 0

    frozen_clock.advance(seconds=settings.CRCR_ZOMBIE_TIMEOUT_SECONDS + 60)
    assert ingest.sweep_zombies() == 3  # as the Celery worker would, in another process
    text = scrape(client)
    assert metric(text, "crcr_jobs_in_progress") == 0
    assert metric(text, "crcr_sweeper_closed_jobs_24h") == 3
    frozen_clock.advance(hours=25)
    assert metric(scrape(client), "crcr_sweeper_closed_jobs_24h") == 0


def test_in_process_queue_depth_counts_tasks_waiting_for_the_pool(client, monkeypatch):
    pool = ThreadPoolExecutor(max_workers=1)
    release = threading.Event()
    monkeypatch.setattr(taskqueue, "_pool", pool)
    try:
        for _ in range(4):
            pool.submit(release.wait, 10)
        time.sleep(0.05)  # the one worker thread has taken the first
        assert metric(scrape(client), "crcr_task_queue_depth", backend="inprocess") == 3
    finally:
        release.set()
        pool.shutdown(wait=True)


@pytest.fixture
def own_redis():
    """A private redis-server on a free port (the shared one is never touched)."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
    process = subprocess.Popen(
        [*command, "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield url
    process.terminate()
    process.wait(timeout=10)


def test_broker_queue_depth_is_the_celery_list_length_on_redis(client, settings, own_redis):
    settings.CELERY_BROKER_URL = own_redis
    redis.Redis.from_url(own_redis).rpush(metrics.CELERY_DEFAULT_QUEUE, "a", "b", "c")
    text = scrape(client)
    assert metric(text, "crcr_task_queue_depth", backend="redis") == 3
    assert 'backend="inprocess"' not in text


def test_an_unreachable_broker_leaves_the_depth_out_but_the_scrape_answers(client, settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    text = scrape(client)
    assert "crcr_task_queue_depth" not in text
    assert metric(text, "crcr_database_up") == 1


def test_metrics_token_requires_the_bearer(client, settings):
    settings.METRICS_TOKEN = "s3cret-scrape"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic s3cret-scrape").status_code == 401
    assert scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-scrape")
    assert client.post("/metrics").status_code == 405


def _job(backend, run_id: int) -> Job:
    body = builders.callback_body(run_id=run_id, job_name=f"job-{run_id}")
    ingest.store(backend, parse_callback(body, REPO), source=Job.Source.CALLBACK)
    return Job.objects.get(run_id=run_id)


def test_reconciler_lag_and_failing_mirror_rows_are_read_at_scrape_time(
    client, frozen_clock, settings
):
    now = frozen_clock()
    ago = lambda **delta: now - dt.timedelta(**delta)  # noqa: E731
    max_attempts = mirror._max_attempts()
    backend = builders.downstream(REPO, Level.L4)
    # Check runs: one waiting for 5 minutes, one sent, one given up (not waiting: failing).
    CheckRunMirror.objects.create(
        job=_job(backend, 1),
        wanted=True,
        desired_hash="b",
        sent_hash="a",
        check_run_id=7,
        source_updated_at=ago(minutes=5),
        created_at=ago(minutes=9),
    )
    CheckRunMirror.objects.create(
        job=_job(backend, 2),
        wanted=True,
        desired_hash="a",
        sent_hash="a",
        check_run_id=8,
        created_at=ago(hours=1),
    )
    CheckRunMirror.objects.create(
        job=_job(backend, 3),
        wanted=True,
        desired_hash="c",
        attempts=max_attempts,
        last_error="422 Invalid",
        created_at=ago(hours=2),
    )
    # Gates: one retrying after a failed create (evaluated a minute ago), one given up.
    GateCheck.objects.create(
        head_sha="a" * 40,
        desired_hash="d",
        attempts=2,
        last_error="503",
        evaluated_at=ago(minutes=1),
        created_at=ago(minutes=3),
    )
    GateCheck.objects.create(
        head_sha="b" * 40,
        desired_hash="d",
        attempts=max_attempts,
        last_error="403",
        created_at=ago(minutes=30),
    )
    # Beyond the reconciler's window: never retried again, so neither lag nor failure.
    settings.CRCR_MIRROR_WINDOW_SECONDS = 86400
    GateCheck.objects.create(
        head_sha="c" * 40, desired_hash="d", attempts=1, last_error="503", created_at=ago(days=2)
    )
    OncallComment.objects.create(
        pr_number=5, downstream=backend, desired_hash="x", created_at=ago(minutes=4)
    )
    RerunRequest.objects.create(
        downstream=backend,
        run_id=1,
        kind="all",
        delivery_id="r1",
        created_at=ago(seconds=90),
        attempts=1,
        reason="502 Bad Gateway",
    )
    RerunRequest.objects.create(
        downstream=backend,
        run_id=2,
        kind="all",
        delivery_id="r2",
        created_at=ago(hours=3),
        outcome=RerunRequest.Outcome.FAILED,
        reason="404",
    )
    Notification.objects.create(
        event_key="k1",
        event="warning:1:opened",
        event_type="demotion_warning",
        kind="email",
        recipient="a@example.org",
        payload={},
        created_at=ago(minutes=10),
    )
    Notification.objects.create(
        event_key="k2",
        event="warning:2:opened",
        event_type="demotion_warning",
        kind="email",
        recipient="a@example.org",
        payload={},
        status=Notification.Status.SENT,
        created_at=ago(hours=5),
    )

    text = scrape(client)

    def lag(queue: str) -> float:
        return metric(text, "crcr_reconciler_lag_seconds", queue=queue)

    def backlog(queue: str) -> float:
        return metric(text, "crcr_reconciler_backlog", queue=queue)

    assert (backlog("check_run"), lag("check_run")) == (1, 300)
    assert (backlog("gate"), lag("gate")) == (1, 60)
    assert (backlog("oncall_comment"), lag("oncall_comment")) == (1, 240)
    assert (backlog("rerun"), lag("rerun")) == (1, 90)
    assert (backlog("notification"), lag("notification")) == (1, 600)
    assert (backlog("dispatch"), lag("dispatch")) == (0, 0)

    def failing(kind: str, state: str) -> float:
        return metric(text, "crcr_mirror_failing", kind=kind, state=state)

    assert failing("check_run", "given_up") == 1 and failing("check_run", "retrying") == 0
    assert failing("gate", "retrying") == 1 and failing("gate", "given_up") == 1
    assert failing("oncall_comment", "retrying") == failing("oncall_comment", "given_up") == 0
    assert failing("rerun", "retrying") == 1 and failing("rerun", "given_up") == 1

    # Sent at last: the lag falls back to zero on the next scrape.
    CheckRunMirror.objects.filter(sent_hash="a", desired_hash="b").update(sent_hash="b")
    text = scrape(client)
    assert (backlog("check_run"), lag("check_run")) == (0, 0)


def test_a_github_outage_counts_mirror_errors_and_shows_failing_rows(env, client):  # noqa: F811
    before = scrape(client)
    guid, body = env.fan_out()
    env.github.set_outage(Canned.server_error(503))
    env.callback(L4, guid, body, job_name="build")
    after = scrape(client)

    def delta(**labels: str) -> float:
        name = "crcr_mirror_github_errors_total"
        return metric(after, name, **labels) - metric(before, name, **labels)

    failing = CheckRunMirror.objects.exclude(last_error="").count()
    assert failing >= 1
    assert delta(kind="check_run", outcome="retry") == failing
    assert delta(kind="gate", outcome="retry") >= 1
    assert metric(after, "crcr_mirror_failing", kind="check_run", state="retrying") == failing
    assert metric(after, "crcr_reconciler_backlog", queue="check_run") == failing
