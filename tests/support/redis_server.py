"""A private `redis-server` on a free port for fault tests (never the machine's 6379).

    server = RedisServer().start()      # --save "" --appendonly no: a restart loses everything
    server.stop(); server.start()       # the same port again; server.close() at the end
    drain_celery_queue(server.url)      # run what reached the broker, in this thread

`drain_celery_queue` stands in for a worker: it pops the task messages the broker holds and
runs each task's body (`task.run`), as `tests.support.tasks.InlineTasks` does for the pool.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any

import pytest

REDIS_BINARY = shutil.which("redis-server")
needs_redis_server = pytest.mark.skipif(
    REDIS_BINARY is None, reason="redis-server is not installed"
)


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """One redis-server process on 127.0.0.1, no persistence; stop and start keep the port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self._dir = tempfile.mkdtemp(prefix="crcr-redis-")

    @property
    def url(self) -> str:
        """The redis:// URL of database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Any:
        """A redis-py client for this server."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING."""
        assert REDIS_BINARY is not None
        self.process = subprocess.Popen(
            [
                REDIS_BINARY,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return self
            except Exception:
                time.sleep(0.05)  # polling a starting process
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        """Kill the server (SIGKILL: whatever it held is gone)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def close(self) -> None:
        """Stop the server and remove its working directory."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def flushall(self) -> None:
        """Empty every database of the server."""
        self.client().flushall()


def drain_celery_queue(url: str, queue: str = "celery", limit: int = 10_000) -> list[str]:
    """Run every task message waiting in `queue` (and any it enqueues); their names, in order."""
    import redis

    from config.celery import app

    conn = redis.Redis.from_url(url, socket_timeout=5)
    ran: list[str] = []
    while len(ran) < limit:
        raw = conn.rpop(queue)  # kombu pushes with LPUSH: the oldest message is on the right
        if raw is None:
            return ran
        message = json.loads(raw)
        body = message["body"]
        if message["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args, kwargs, _embed = json.loads(body)
        name = message["headers"]["task"]
        app.tasks[name].run(*args, **kwargs)
        ran.append(name)
    raise AssertionError(f"more than {limit} task messages: a loop?")
