"""The request id follows work handed to Celery: onto the task's log lines, in-process or not; a
delayed task waits for its timer (in-process) or its countdown (the broker)."""

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from celery import shared_task

from config.logging_context import (
    REQUEST_ID_TASK_HEADER,
    current_request_id,
    request_id_var,
    task_request_id,
)
from hud import tasks
from hud.core import taskqueue
from tests.ops.test_logging import json_lines  # noqa: F401  (the fixture, by name)
from tests.relay.conftest import fixture_body, new_guid, sign

pytestmark = pytest.mark.django_db
logger = logging.getLogger("tests.task_probe")
seen: list[str | None] = []


@shared_task(name="tests.request_id_probe")
def probe(label: str) -> str | None:
    """Log one line and report the request id bound while running."""
    logger.info("probe ran", extra={"label": label})
    seen.append(current_request_id())
    return current_request_id()


@pytest.fixture(autouse=True)
def _clean():
    seen.clear()
    token = request_id_var.set(None)
    yield
    request_id_var.reset(token)


@pytest.fixture
def pool(monkeypatch):
    """A real one-thread in-process pool (not the inline stand-in), drained at the end."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crcr-task")
    monkeypatch.setattr(taskqueue, "_pool", executor)
    yield executor
    executor.shutdown(wait=True)


def test_the_in_process_pool_runs_a_task_under_the_enqueuing_request_id(
    settings,
    pool,
    json_lines,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    settings.CELERY_BROKER_URL = None
    request_id_var.set("req-in-process-1")
    with django_capture_on_commit_callbacks(execute=True):
        taskqueue.enqueue(probe, "first")
    request_id_var.set(None)  # the request is over before the task runs
    with django_capture_on_commit_callbacks(execute=True):
        taskqueue.enqueue(probe, "second")  # enqueued by no request (e.g. a periodic job)
    pool.shutdown(wait=True)

    assert seen == ["req-in-process-1", None]  # the pool thread does not keep the last id
    lines = {line["label"]: line for line in json_lines() if line.get("label")}
    assert lines["first"]["request_id"] == "req-in-process-1"
    assert "request_id" not in lines["second"]


def test_the_broker_message_carries_the_request_id_header(
    settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    sent: list[dict] = []
    monkeypatch.setattr(probe, "apply_async", lambda **options: sent.append(options))
    request_id_var.set("req-broker-7")
    with django_capture_on_commit_callbacks(execute=True):
        taskqueue.enqueue(probe, "x")
    assert sent == [{"args": ("x",), "headers": {REQUEST_ID_TASK_HEADER: "req-broker-7"}}]


def test_a_delayed_task_reaches_the_pool_only_when_its_timer_fires(
    settings, pool, monkeypatch, django_capture_on_commit_callbacks
):
    settings.CELERY_BROKER_URL = None
    timers: list[tuple[float, object]] = []
    monkeypatch.setattr(taskqueue, "_later", lambda seconds, work: timers.append((seconds, work)))
    with django_capture_on_commit_callbacks(execute=True):
        taskqueue.enqueue(probe, "later", delay=5)
    assert [seconds for seconds, _ in timers] == [5]
    pool.shutdown(wait=True)
    assert seen == []  # committed, but held back
    monkeypatch.setattr(taskqueue, "_pool", ThreadPoolExecutor(max_workers=1))
    timers[0][1]()  # the timer fires
    taskqueue._pool.shutdown(wait=True)
    assert seen == [None]


def test_the_timer_thread_hands_the_task_over_after_the_delay(settings, pool):
    settings.CELERY_BROKER_URL = None
    fired = threading.Event()
    began = time.monotonic()
    taskqueue._later(0.05, fired.set)
    assert fired.wait(timeout=10)
    assert time.monotonic() - began >= 0.05


def test_a_delayed_broker_message_carries_the_countdown(
    settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    sent: list[dict] = []
    monkeypatch.setattr(probe, "apply_async", lambda **options: sent.append(options))
    with django_capture_on_commit_callbacks(execute=True):
        taskqueue.enqueue(probe, "x", delay=5)
    assert sent == [{"args": ("x",), "headers": {REQUEST_ID_TASK_HEADER: None}, "countdown": 5}]


def test_a_worker_binds_the_header_for_the_task_and_forgets_it_after(json_lines):  # noqa: F811
    result = probe.apply(args=("on-worker",), headers={REQUEST_ID_TASK_HEADER: "req-worker-3"})
    assert result.get() == "req-worker-3"
    assert current_request_id() is None  # task_postrun cleared it
    assert probe.apply(args=("no-header",)).get() is None
    # An unusable id (a header is client-controlled only through our own enqueue) is dropped.
    bad = probe.apply(args=("bad",), headers={REQUEST_ID_TASK_HEADER: "has space\nand line"})
    assert bad.get() is None
    lines = {line["label"]: line for line in json_lines() if line.get("label")}
    assert lines["on-worker"]["request_id"] == "req-worker-3"
    assert "request_id" not in lines["no-header"] and "request_id" not in lines["bad"]


def test_a_worker_reads_the_header_from_the_message_attributes():
    """On a real worker custom headers arrive as attributes of the task's request."""

    class WorkerRequest:
        headers = None

    request = WorkerRequest()
    setattr(request, REQUEST_ID_TASK_HEADER, "req-from-message")
    assert task_request_id(request) == "req-from-message"


def test_a_webhook_request_id_reaches_the_dispatch_task_it_enqueues(
    relay_settings, fake_github, backends, client, monkeypatch, django_capture_on_commit_callbacks
):
    """End to end through the middleware: the id of the webhook request is on the message."""
    relay_settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    sent: list[dict] = []
    monkeypatch.setattr(tasks.send_dispatch, "apply_async", lambda **options: sent.append(options))
    raw = json.dumps(fixture_body("pull_request.opened")).encode()
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": new_guid(),
        "X-Hub-Signature-256": sign(raw),
        "X-Request-ID": "edge-webhook-9",
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/github/webhook", data=raw, content_type="application/json", headers=headers
        )
    assert response["X-Request-ID"] == "edge-webhook-9"
    assert response.json()["status"] == "dispatched"
    assert sent and all(
        options["headers"] == {REQUEST_ID_TASK_HEADER: "edge-webhook-9"} for options in sent
    )
