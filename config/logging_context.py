"""Request ids: taken from `X-Request-ID` (or made), echoed back, and put on every log record.

The id lives in a context variable, so it follows the request through threads of the same
context (gunicorn's sync workers, runserver) without being passed around, and a logging filter
copies it onto each record; the JSON formatter then writes it as `"request_id"`.

Tasks carry it too: `hud.core.taskqueue.enqueue` sends it as a Celery message header (or hands
it to the
in-process pool's thread), and config.celery binds it while the task runs, so a task's log
lines share the id of the request that caused them.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar

from django.core.signals import request_finished
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

HEADER = "X-Request-ID"
# The Celery message header carrying the enqueuing request's id to the task (config.celery).
REQUEST_ID_TASK_HEADER = "crcr_request_id"
# Letters, digits and a few punctuation marks only: the id is echoed into headers and logs,
# so nothing that could split a header, forge a log field or carry a secret of real length.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,63}")

request_id_var: ContextVar[str | None] = ContextVar("crcr_request_id", default=None)


def clean_request_id(value: str | None) -> str | None:
    """The client's id when it is 1–64 safe characters, else None."""
    if value and _SAFE_ID.fullmatch(value):
        return value
    return None


def new_request_id() -> str:
    """A fresh id for a request that brought none (or an unusable one)."""
    return uuid.uuid4().hex


def current_request_id() -> str | None:
    """The id of the request being handled in this context, if any."""
    return request_id_var.get()


class RequestIdFilter(logging.Filter):
    """Puts the current request id on each record (as `request_id`) when there is one."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate, never drop."""
        request_id = request_id_var.get()
        if request_id is not None and not hasattr(record, "request_id"):
            record.request_id = request_id
        return True


class RequestIdMiddleware:
    """Takes or makes the request id, binds it for the request and returns it in the answer."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        """Bind the id around the whole request, then echo it."""
        request_id = clean_request_id(request.headers.get(HEADER)) or new_request_id()
        request.request_id = request_id  # type: ignore[attr-defined]
        # Not reset on the way out: Django logs 4xx/5xx answers (django.request) after the
        # middleware returns, and a streamed body is produced later still. `request_finished`
        # clears it once the response is closed.
        request_id_var.set(request_id)
        response = self.get_response(request)
        response[HEADER] = request_id
        return response


def task_request_id(task_request: object) -> str | None:
    """The request id a Celery task was enqueued with (a message header), if usable.

    On a worker custom headers become attributes of `task.request`; `Task.apply(headers=...)`
    keeps them in `task.request.headers`.
    """
    value = getattr(task_request, REQUEST_ID_TASK_HEADER, None)
    if value is None:
        headers = getattr(task_request, "headers", None) or {}
        value = headers.get(REQUEST_ID_TASK_HEADER) if isinstance(headers, dict) else None
    return clean_request_id(value) if isinstance(value, str) else None


@receiver(request_finished)
def _forget_request_id(**kwargs: object) -> None:
    """The request is over: later records of this thread belong to no request."""
    request_id_var.set(None)
