"""End to end with a real Celery worker: webhook → Redis → worker → fake GitHub → database.

Needs CRCR_TEST_REDIS_URL (a Redis database the test may use) and a database the worker
process can open: PostgreSQL, or the SQLite test file (WAL, so both processes share it).
"""

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from config.celery import app as celery_app
from hud import tasks
from hud.models import Dispatch
from tests.relay.conftest import SECRET, fixture_body, new_guid, post_webhook

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


@pytest.fixture
def worker(fake_github, settings, tmp_path, monkeypatch):
    """A `celery -A config worker` subprocess on the test database and Redis; stopped after."""
    settings.CELERY_BROKER_URL = REDIS_URL
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
                "--pool=threads",
                "--concurrency=4",
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
        pool = celery_app.pool
        pool.force_close_all()


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
