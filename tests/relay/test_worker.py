"""End to end with a real Celery worker: webhook → Redis → worker → fake GitHub → database.

Needs CRCR_TEST_REDIS_URL (a Redis database the test may use) and a database the worker
process can open: PostgreSQL, or the SQLite test file (WAL, so both processes share it).
"""

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from kombu import pools as kombu_pools

from config.celery import app as celery_app
from hud import relay, tasks
from hud.checks import mirror
from hud.ingestion import ingest
from hud.models import CheckRunMirror, Dispatch, GateCheck
from tests.relay.conftest import SECRET, UPSTREAM, fixture_body, new_guid, post_webhook
from tests.support import builders
from tests.support.fake_github import Canned

REDIS_URL = os.environ.get("CRCR_TEST_REDIS_URL")
ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 60

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not REDIS_URL, reason="CRCR_TEST_REDIS_URL is not set"),
]


def _database_url() -> str:
    """The test database as a URL the worker process can open."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        name = str(db["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            pytest.skip("an in-memory SQLite database cannot be shared with a worker")
        return f"sqlite:///{name}"
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip(f"no worker URL for {db['ENGINE']}")
    from urllib.parse import quote

    auth = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = db["HOST"] or "localhost"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{auth}@{host}{port}/{db['NAME']}"


def _wait_for(predicate, seconds: float = WAIT_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)  # polling a real process, not sleeping through a backoff
    return False


@contextlib.contextmanager
def running_worker(fake_github, tmp_path, monkeypatch, pool: tuple[str, ...], **extra_env: str):
    """A `celery -A config worker` subprocess on the test database and Redis; stopped after."""
    monkeypatch.setattr(celery_app.conf, "broker_url", REDIS_URL)
    queue = f"crcr-test-{os.getpid()}"
    monkeypatch.setattr(celery_app.conf, "task_default_queue", queue)
    app = fake_github.default_app
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "CELERY_BROKER_URL": REDIS_URL,
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_APP_ID": str(app.app_id),
        "GITHUB_APP_PRIVATE_KEY": app.private_key_pem,
        "GITHUB_TIMEOUT": "5",
        "GITHUB_WEBHOOK_SECRET": SECRET,
        # INFO: the test reads the worker's "ready." and task-result lines from its log.
        "LOG_LEVEL": "INFO",
        # A server database without a key is refused as a production start; this is a test.
        "SECRET_KEY": "worker-test-" + secrets.token_hex(16),
    }
    for name in ("GITHUB_APP_PRIVATE_KEY_FILE", "GITHUB_DISPATCH_APP_ID", "CACHE_URL"):
        env.pop(name, None)
    env.update(extra_env)
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                *pool,
                "-Q",
                queue,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
            ],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        ready = _wait_for(lambda: b"ready." in log.read_bytes() or process.poll() is not None)
        if not ready or process.poll() is not None:
            pytest.fail(f"the worker did not start:\n{log.read_text()[-4000:]}")
        yield process, log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        # Close this process's broker connections; the next test's enqueues open fresh ones.
        kombu_pools.reset()
        celery_app._pool = None
        celery_app.amqp._producer_pool = None


@pytest.fixture
def worker(fake_github, settings, tmp_path, monkeypatch):
    """A threaded worker (4 threads) on the test database and Redis."""
    settings.CELERY_BROKER_URL = REDIS_URL
    with running_worker(
        fake_github, tmp_path, monkeypatch, ("--pool=threads", "--concurrency=4")
    ) as started:
        yield started


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_sends_every_dispatch_once(worker, fake_github, backends, client, settings):
    settings.GITHUB_WEBHOOK_SECRET = SECRET
    process, log = worker
    guid = new_guid()
    body = fixture_body("pull_request.opened")

    response = post_webhook(client, "pull_request", body, guid=guid)

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "dispatched"

    def all_sent() -> bool:
        return set(Dispatch.objects.values_list("outcome", flat=True)) == {"sent"}

    if not _wait_for(all_sent):
        rows = list(Dispatch.objects.values("outcome", "reason"))
        pytest.fail(f"dispatches not sent: {rows}\n{log.read_text()[-4000:]}")

    # A duplicate enqueue of a sent dispatch is a no-op in the worker too.
    first = Dispatch.objects.order_by("id").first()
    tasks.send_dispatch.apply_async(args=[first.id])
    assert _wait_for(lambda: b"'skipped'" in log.read_bytes()), log.read_text()[-4000:]

    assert sorted(d["repository"] for d in fake_github.dispatches) == [
        "org1/repo1",
        "org2/repo2",
        "org3/device-repo",
        "org4/repo4",
    ]
    expected = {"event_type": "pull_request", "delivery_id": guid, "payload": body}
    assert all(d["client_payload"] == expected for d in fake_github.dispatches)
    assert process.poll() is None  # still running: the fixture stops it


def _pool_child(worker_pid: int) -> int:
    """The pid of the prefork worker's one pool process."""
    children = [
        int(pid)
        for pid in Path(f"/proc/{worker_pid}/task/{worker_pid}/children").read_text().split()
    ]
    assert len(children) == 1, children
    return children[0]


def _mirror_to(fake_github, settings) -> None:
    """Webhooks relayed through Redis, and check runs mirrored onto the fake GitHub."""
    settings.GITHUB_WEBHOOK_SECRET = SECRET
    settings.CELERY_BROKER_URL = REDIS_URL
    settings.CRCR_UPSTREAM_REPO = UPSTREAM
    settings.CRCR_CHECK_RUNS = True
    settings.GITHUB_APP_ID = str(fake_github.default_app.app_id)
    settings.GITHUB_APP_PRIVATE_KEY = fake_github.default_app.private_key_pem


@pytest.mark.django_db(transaction=True)
def test_a_worker_process_killed_mid_sync_is_redone_in_seconds_without_a_duplicate(
    fake_github, backends, client, settings, tmp_path, monkeypatch
):
    _mirror_to(fake_github, settings)
    guid, body = new_guid(), fixture_body("pull_request.opened")
    # The first check run GitHub is asked for answers late: the worker dies while it waits.
    fake_github.enqueue("POST", f"/repos/{UPSTREAM}/check-runs", Canned.slow(2.0))
    with running_worker(
        fake_github,
        tmp_path,
        monkeypatch,
        ("--pool=prefork", "--concurrency=1"),
        CACHE_URL=REDIS_URL,  # the leases' holders, shared by the worker's processes
        CRCR_UPSTREAM_REPO=UPSTREAM,
    ) as (process, log):
        assert post_webhook(client, "pull_request", body, guid=guid).status_code == 200
        callback = builders.callback_body(
            "org4/repo4", delivery_id=guid, payload=body, job_name="test"
        )
        outcome = ingest.receive_callback(
            "org4/repo4", json.dumps(callback).encode(), builders.callback_token()
        )

        def sending() -> bool:  # a create on the wire: the row knows it asked, not the answer
            return any(
                model.objects.filter(create_attempted_at__isnull=False, check_run_id=None).exists()
                for model in (CheckRunMirror, GateCheck)
            )

        assert _wait_for(sending), log.read_text()[-4000:]
        os.kill(_pool_child(process.pid), signal.SIGKILL)
        killed = time.monotonic()

        def sent() -> bool:
            rows = [
                CheckRunMirror.objects.filter(job_id=outcome.job_id).first(),
                GateCheck.objects.filter(head_sha=body["pull_request"]["head"]["sha"]).first(),
            ]
            return all(
                row and row.check_run_id and row.sent_hash == row.desired_hash for row in rows
            )

        assert _wait_for(sent), log.read_text()[-4000:]
        recovered = time.monotonic() - killed
    print(f"\nworker process killed mid-sync: check run sent {recovered:.1f} s later")
    assert recovered < 60
    runs = fake_github.check_runs_for(UPSTREAM)
    names = [run["name"] for run in runs]
    assert sorted(names) == sorted(set(names)), names  # one check run per name, no duplicate
    assert f"crcr/org4/repo4/{callback['workflow']['name']}/test" in names
    assert "crcr/gate" in names


@pytest.mark.django_db(transaction=True)
def test_a_whole_worker_lost_mid_sync_is_redone_within_a_minute_without_a_duplicate(
    fake_github, backends, client, settings, tmp_path, monkeypatch
):
    """The worker and its pool process SIGKILLed (a lost host): no message comes back before
    the broker's visibility timeout, so the reconcilers (beat's 20 s tick, run here every
    2 s) find the claims whose process stopped beating and hand them to a new worker."""
    _mirror_to(fake_github, settings)
    # The reconcilers here read the claims and heartbeats the workers keep in Redis.
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "crcr",  # a worker's prefix (config/settings.py)
        }
    }
    guid, body = new_guid(), fixture_body("pull_request.opened")
    fake_github.enqueue("POST", f"/repos/{UPSTREAM}/check-runs", Canned.slow(3.0))
    pool = ("--pool=prefork", "--concurrency=1")
    extra = {"CACHE_URL": REDIS_URL, "CRCR_UPSTREAM_REPO": UPSTREAM}
    with running_worker(fake_github, tmp_path, monkeypatch, pool, **extra) as (process, log):
        assert post_webhook(client, "pull_request", body, guid=guid).status_code == 200
        callback = builders.callback_body(
            "org4/repo4", delivery_id=guid, payload=body, job_name="test"
        )
        outcome = ingest.receive_callback(
            "org4/repo4", json.dumps(callback).encode(), builders.callback_token()
        )

        def sending() -> bool:
            return any(
                model.objects.filter(create_attempted_at__isnull=False, check_run_id=None).exists()
                for model in (CheckRunMirror, GateCheck)
            )

        assert _wait_for(sending), log.read_text()[-4000:]
        os.kill(_pool_child(process.pid), signal.SIGKILL)
        process.kill()
        process.wait(timeout=10)
        killed = time.monotonic()

    second = tmp_path / "second"
    second.mkdir()
    with running_worker(fake_github, second, monkeypatch, pool, **extra) as (_, log):

        def sent() -> bool:
            mirror.reconcile()
            relay.reconcile()
            rows = [
                CheckRunMirror.objects.filter(job_id=outcome.job_id).first(),
                GateCheck.objects.filter(head_sha=body["pull_request"]["head"]["sha"]).first(),
            ]
            return all(
                row and row.check_run_id and row.sent_hash == row.desired_hash for row in rows
            )

        def reconciled() -> bool:
            time.sleep(2.0)  # the reconcilers' tick, faster than beat's for the test
            return sent()

        assert _wait_for(reconciled, seconds=90), log.read_text()[-4000:]
        recovered = time.monotonic() - killed
    print(f"\nwhole worker lost mid-sync: check run and gate sent {recovered:.1f} s later")
    assert recovered < 60
    names = [run["name"] for run in fake_github.check_runs_for(UPSTREAM)]
    assert sorted(names) == sorted(set(names)), names  # one check run per name, no duplicate
    assert f"crcr/org4/repo4/{callback['workflow']['name']}/test" in names
    assert "crcr/gate" in names
