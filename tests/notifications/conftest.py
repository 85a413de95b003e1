"""A local webhook receiver (a real HTTP server on 127.0.0.1), tasks run in-line, targets."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hud.models import NotificationTarget

WEBHOOK_SECRET_PATH = "/services/T000/B000/s3cr3t-webhook-token"


@dataclass
class Received:
    """One webhook POST: its path, headers and JSON body."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class WebhookReceiver:
    """Records POSTs; answers with scripted (status, delay) pairs, then 200 "ok" like Slack."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    script: list[tuple[int, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def hook_url(self) -> str:
        """A Slack-like incoming-webhook URL on this server (its path is the secret)."""
        return f"{self.url}{WEBHOOK_SECRET_PATH}"

    def answer_next(self, status: int, times: int = 1, delay: float = 0.0) -> None:
        """Answer the next `times` POSTs with `status` after `delay` seconds."""
        self.script.extend([(status, delay)] * times)


class _Handler(BaseHTTPRequestHandler):
    receiver: WebhookReceiver

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        with self.receiver.lock:
            self.receiver.received.append(
                Received(
                    self.path,
                    {key.lower(): value for key, value in self.headers.items()},
                    json.loads(raw or b"null"),
                )
            )
            status, delay = self.receiver.script.pop(0) if self.receiver.script else (200, 0.0)
        if delay:
            time.sleep(delay)
        data = b"ok" if status == 200 else b"invalid_token"
        try:
            self.send_response(status)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out first


@pytest.fixture
def webhook() -> Iterator[WebhookReceiver]:
    """A local Slack-like webhook receiver."""
    receiver = WebhookReceiver()
    handler = type("Handler", (_Handler,), {"receiver": receiver})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def notify_settings(settings: Any) -> Any:
    """Mail into django.core.mail.outbox, short timeouts, links to a public address."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.CRCR_PUBLIC_URL = "https://hud.example.org"
    settings.CRCR_NOTIFY_WEBHOOK_TIMEOUT = 0.5
    settings.CRCR_NOTIFY_MAX_ATTEMPTS = 3
    return settings


def target(kind: str, address: str, downstream: Any = None, events: Any = ()) -> NotificationTarget:
    """A target added directly (the admin paths are tested on their own)."""
    from hud.core import clock

    return NotificationTarget.objects.create(
        kind=kind,
        address=address,
        downstream=downstream,
        events=list(events),
        created_at=clock.now(),
    )
