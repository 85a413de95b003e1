"""PostgreSQL stopped mid-load: 503 with Retry-After, never a 500, nothing acknowledged lost.

The test starts its OWN PostgreSQL (initdb + pg_ctl in a temporary folder, a free port, run
as the `postgres` user when we are root) and gunicorn against it; the machine's shared server
is never touched. Callbacks flow from several clients while the server is killed
(`pg_ctl stop -m immediate`, a crash) and started again. Then: every answer was a 2xx or a 503
with Retry-After; everything answered 2xx is in the database; every callback refused with 503
is accepted when sent again.
"""

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings as django_settings

from tests.support import builders

pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.skipif(
        not django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
        reason="PostgreSQL fault test: runs when DATABASE_URL names PostgreSQL",
    ),
]
ROOT = Path(__file__).resolve().parents[2]
REPO = "fault/backend"
SENDERS = 4
LOAD_BEFORE, OUTAGE, LOAD_AFTER = 3.0, 4.0, 4.0  # seconds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OwnPostgres:
    """A throw-away PostgreSQL cluster in a temporary folder, on a free port."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bin = Path(found[-1]).parent
        self.folder = Path(tempfile.mkdtemp(prefix="crcr-pgfault-"))
        self.data = self.folder / "data"
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: run the cluster as `postgres`
            account = pwd.getpwnam("postgres")
            os.chown(self.folder, account.pw_uid, account.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )

    @property
    def url(self) -> str:
        """The server's URL (database added by the caller)."""
        return f"postgres://postgres@127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        log = str(self.folder / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-o", options, "-w", "start")

    def crash(self) -> None:
        """Stop at once, as a crash would (no checkpoint; recovery on the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def destroy(self) -> None:
        """Stop if running and delete everything."""
        with contextlib.suppress(subprocess.SubprocessError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def own_postgres():
    """Our own PostgreSQL, started, with an empty database `crcr_fault`."""
    server = OwnPostgres()
    try:
        server.start()
        with psycopg.connect(f"{server.url}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE crcr_fault")
        yield server
    finally:
        server.destroy()


@pytest.fixture
def app(own_postgres, oidc, tmp_path):
    """gunicorn serving the app against our PostgreSQL; yields its base URL."""
    url = f"{own_postgres.url}/crcr_fault"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CRCR_", "DATABASE_", "CACHE_", "CELERY_", "PROMETHEUS_"))
    }
    env.update(
        DATABASE_URL=url,
        DEBUG="0",
        SECRET_KEY="fault-" + uuid.uuid4().hex,
        ALLOWED_HOSTS="127.0.0.1",
        CRCR_RATE_LIMIT_PER_MIN="1000000",
        CRCR_OIDC_ISSUER=django_settings.CRCR_OIDC_ISSUER,
        CRCR_OIDC_AUDIENCE=django_settings.CRCR_OIDC_AUDIENCE,
        CRCR_OIDC_JWKS_URL=oidc.jwks_url,
        LOG_LEVEL="CRITICAL",
        PYTHONPATH=str(ROOT),
        CACHE_DIR=str(tmp_path / "cache"),
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO hud_downstream (full_name, level, device, oncalls, delisted,"
            " pending_upstream, created_at) VALUES (%s, 2, '', '[]', false, false, now())",
            (REPO,),
        )
    port = _free_port()
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    process = subprocess.Popen(
        [gunicorn, "config.wsgi:application", "--workers", "2", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, process)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(base: str, process: subprocess.Popen | None = None, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError("gunicorn exited")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError("the app did not become ready")


def _body(number: int, status: str) -> dict:
    return builders.callback_body(
        REPO,
        status=status,
        conclusion="failure" if status == "completed" else None,
        delivery_id=f"fault-delivery-{number % 5}",
        run_id=70_000 + number,
        job_name=f"job-{number}",
        failed_tests=[{"name": f"test_{number}"}] if status == "completed" else None,
    )


def test_postgres_stopped_mid_load_answers_503_and_loses_nothing_acknowledged(
    app, own_postgres, oidc
):
    answers: list[tuple[int, str, int, dict, str | None]] = []
    lock = threading.Lock()
    stop = threading.Event()
    numbers = iter(range(1_000_000))

    def post(client: httpx.Client, number: int, status: str) -> tuple[int, dict, str | None]:
        response = client.post(
            "/github/callback",
            json=_body(number, status),
            headers={"Authorization": f"Bearer {oidc.mint(REPO)}"},
        )
        try:
            payload = response.json()
        except ValueError:
            payload = {"raw": response.text[:200]}
        return response.status_code, payload, response.headers.get("Retry-After")

    def sender() -> None:
        with httpx.Client(base_url=app, timeout=30) as client:
            while not stop.is_set():
                with lock:
                    number = next(numbers)
                for status in ("in_progress", "completed"):
                    code, payload, retry_after = post(client, number, status)
                    with lock:
                        answers.append((number, status, code, payload, retry_after))
                    if code == 503:
                        time.sleep(0.05)  # a little patience, as a client told Retry-After

    threads = [threading.Thread(target=sender) for _ in range(SENDERS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(LOAD_BEFORE)
        own_postgres.crash()
        time.sleep(OUTAGE)
        own_postgres.start()
        time.sleep(LOAD_AFTER)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)

    codes = Counter(code for _, _, code, _, _ in answers)
    print(f"\nPostgreSQL fault: {len(answers)} answers {dict(codes)}")
    # Every answer: a 2xx, or a 503 with Retry-After. Never a 500; legitimate traffic, no 4xx.
    assert set(codes) <= {200, 503}, [a for a in answers if a[2] not in (200, 503)][:5]
    for _, _, code, payload, retry_after in answers:
        if code == 503:
            assert payload.get("error") == "unavailable"
            assert retry_after and retry_after.isdigit()
        else:
            assert payload["status"] in {"created", "updated", "duplicate", "stale"}
    assert codes[503] > 0, "the outage was never seen: the test proved nothing"
    outage_index = next(i for i, a in enumerate(answers) if a[2] == 503)
    assert any(a[2] == 200 for a in answers[outage_index:]), "no recovery after the restart"

    # Nothing acknowledged is lost.
    with psycopg.connect(f"{own_postgres.url}/crcr_fault") as conn:
        stored = {
            name: (status, conclusion, tests)
            for name, status, conclusion, tests in conn.execute(
                "SELECT j.job_name, j.status, j.conclusion, count(t.id) FROM hud_job j"
                " LEFT JOIN hud_failedtest t ON t.job_id = j.id"
                " GROUP BY j.job_name, j.status, j.conclusion"
            )
        }
    for number, status, code, _, _ in answers:
        if code != 200:
            continue
        assert f"job-{number}" in stored, f"job-{number} was acknowledged ({status}) but is lost"
        if status == "completed":
            assert stored[f"job-{number}"] == ("completed", "failure", 1)

    # What was refused with 503 is accepted once PostgreSQL is back (as a retry would be).
    _wait_ready(app)
    with httpx.Client(base_url=app, timeout=30) as client:
        for number, status, code, _, _ in answers:
            if code == 503:
                retried, payload, _ = post(client, number, status)
                assert retried == 200, payload
