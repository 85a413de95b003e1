"""Ingestion throughput against its floor, and answer → visible latency (issue 9, perf 1–2).

    .venv/bin/python bench/ingest.py [--jobs 600] [--jobs-large 40] [--rounds 3] [--concurrency 16]
        [--cache-url redis://127.0.0.1:6379/3]   # the workers' cache: Redis, as in production
                                                 # (default: the embedded file cache)

What it does, all on this machine, cleaning up after itself:

1. creates its own database `crcr_bench` on the PostgreSQL at --pg (never reconfigures the
   server; the database is dropped at the end) and migrates it;
2. starts a local JWKS server (the approach of tests/support/oidc.py) and gunicorn with the
   documented worker count (deploy/gunicorn.conf.py when it exists, else 2 × cores + 1), DEBUG
   off, CRCR_RATE_LIMIT_PER_MIN set far above what the run sends;
3. for 0, 20 and 1,000 failed tests, drives in_progress + completed pairs of distinct jobs at
   --concurrency through `POST /github/callback` (threads sending prebuilt requests on plain
   sockets), and the FLOOR: the same work without a web framework at the same concurrency, side
   by side in the same run — the same validation function (hud.core.payload.parse_callback), the
   same token verification with the same library and key (PyJWT, RS256), the same rows written
   by the same statements (hud.models.sql's strings) through psycopg with the same
   transaction boundaries as hud.ingestion.ingest. Tokens and bodies are made before timing.
   Prints both rates and
   `ingest/floor ratio: X.XX` per size;
4. measures the time from a callback's 200 answer to the job being visible through
   `GET /api/v1/jobs` and on the backend page `/crcr/<org>/<repo>`.

`--profile` instead runs the Django path in-process under pyinstrument and prints where the
time goes (the tool used to find what to fix when the ratio is below target).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()  # hud.models.sql sits in the models package, which needs the app registry

import httpx  # noqa: E402
import jwt  # noqa: E402
import psycopg  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from hud.core.payload import PayloadError, decode_json, parse_callback  # noqa: E402
from hud.ingestion import derived  # noqa: E402
from hud.models import sql  # noqa: E402
from tests.support.oidc import CRCR_AUDIENCE, GITHUB_ISSUER, OidcIssuer, SigningKey  # noqa: E402
from tests.support.oidc import _JwksServer as JwksServer  # noqa: E402

# Several people may bench one server at once: each can name their own database.
DB_NAME = os.environ.get("CRCR_BENCH_DATABASE", "crcr_bench")
RATE_LIMIT_PER_MIN = 10_000_000  # far above anything this run sends: it never limits
BACKENDS = ("bench-org/backend-a", "bench-org/backend-b", "bench-org/backend-c", "bench-org/d")
LATENCY_BACKEND = "bench-org/latency"
DELIVERIES = 50
FIXTURE = Path("/work/shared/fixtures/github/pull_request.synchronize.json")
TOKEN_LIFETIME = 3600  # minted before timing, so they must outlive the longest round
LEEWAY = 30
PYTHON = sys.executable


# --- Bodies and tokens (made before timing) -----------------------------------------------


def _pr_payload(number: int, sha: str) -> dict:
    """The verbatim upstream pull_request webhook body a dispatch carries (about 28 KB)."""
    if FIXTURE.exists():
        body = json.loads(FIXTURE.read_text())
    else:  # pragma: no cover - the fixtures live in the shared folder
        body = {"action": "synchronize", "pull_request": {"head": {}}, "repository": {}}
    body["number"] = number
    body["pull_request"]["number"] = number
    body["pull_request"]["head"]["sha"] = sha
    body["repository"]["full_name"] = "pytorch/pytorch"
    return body


def _delivery(index: int) -> tuple[str, int, str]:
    """(delivery_id, PR number, head SHA) of the index-th seeded delivery."""
    return f"bench-delivery-{index:04d}", 10_000 + index, f"{index:040x}"


def failed_tests(count: int) -> list[dict]:
    """`count` failed tests shaped like the public action's JUnit extraction."""
    return [
        {
            "name": f"test_op_{k}_cuda_float32",
            "classname": f"test.test_ops.TestCommon{k % 17}",
            "message": f"AssertionError: Tensor-likes are not close! Mismatched elements: {k}"
            + " x" * 60,
            "stacktrace": "Traceback (most recent call last):\n"
            + '  File "test/test_ops.py", line 1234, in test_op\n    self.assertEqual(a, b)\n' * 9,
            "duration": 0.25 + k / 1000,
        }
        for k in range(count)
    ]


def callback_body(
    repo: str, delivery: int, run_id: int, job_name: str, status: str, failures: int
) -> dict:
    """A callback body as the public action sends it (strings where numbers are meant)."""
    delivery_id, number, sha = _delivery(delivery)
    now = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    workflow: dict[str, Any] = {
        "schema_version": "1",
        "status": status,
        "conclusion": None,
        "name": "crcr",
        "url": f"https://github.com/{repo}/actions/runs/{run_id}",
        "run_id": str(run_id),
        "run_attempt": "1",
        "job_name": job_name,
        "check_run_id": f"{run_id}1",
        "started_at": now,
        "completed_at": None,
    }
    if status == "completed":
        workflow["conclusion"] = "failure" if failures else "success"
        workflow["completed_at"] = now
        workflow["test_results"] = {
            "passed": "8430",
            "failed": str(failures),
            "skipped": "20",
            "total": str(8450 + failures),
        }
        if failures:
            workflow["failed_tests"] = failed_tests(failures)
    return {
        "event_type": "pull_request",
        "delivery_id": delivery_id,
        "payload": _pr_payload(number, sha),
        "workflow": workflow,
    }


@dataclass(frozen=True)
class Callback:
    """One prepared request: the bearer token and the raw body."""

    token: str
    body: bytes

    @property
    def request(self) -> bytes:
        """The whole HTTP request, as the load generator sends it."""
        head = (
            "POST /github/callback HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(self.body)}\r\n\r\n"
        )
        return head.encode() + self.body


def prepare_jobs(
    issuer: OidcIssuer, tag: str, count: int, failures: int, first_run_id: int
) -> list[tuple[Callback, Callback]]:
    """`count` distinct jobs, each an (in_progress, completed) pair with fresh tokens."""
    jobs = []
    for index in range(count):
        repo = BACKENDS[index % len(BACKENDS)]
        run_id = first_run_id + index
        name = f"{tag}-{index}"
        pair = []
        for status in ("in_progress", "completed"):
            body = callback_body(repo, index % DELIVERIES, run_id, name, status, failures)
            token = issuer.mint(repo, exp=int(time.time()) + TOKEN_LIFETIME)
            pair.append(Callback(token, json.dumps(body).encode()))
        jobs.append((pair[0], pair[1]))
    return jobs


# --- The database -------------------------------------------------------------------------


def admin_connection(base: str) -> psycopg.Connection:
    """An autocommit connection to the server's maintenance database."""
    return psycopg.connect(f"{base}/postgres", autocommit=True)


def create_database(base: str) -> None:
    """Create our own database (dropping a leftover of an interrupted run first)."""
    with admin_connection(base) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")


def drop_database(base: str) -> None:
    """Drop our database, whatever still holds a connection to it."""
    with admin_connection(base) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def seed(url: str) -> None:
    """Backends at L2 and the deliveries (with dispatches) the callbacks answer."""
    now = dt.datetime.now(dt.UTC)
    with psycopg.connect(url) as conn:
        ids = []
        for name in (*BACKENDS, LATENCY_BACKEND):
            row = conn.execute(
                "INSERT INTO hud_downstream (full_name, level, device, oncalls, delisted,"
                " pending_upstream, created_at) VALUES (%s, 2, '', '[]', false, false, %s)"
                " RETURNING id",
                (name, now),
            ).fetchone()
            ids.append(row[0])
        for index in range(DELIVERIES):
            delivery_id, number, sha = _delivery(index)
            payload = _pr_payload(number, sha)
            delivery_pk = conn.execute(
                "INSERT INTO hud_delivery (delivery_id, event_type, upstream_repo, action,"
                " pr_number, pr_title, pr_author, head_sha, base_sha, base_ref, ref, labels,"
                " received_at, body_sha256, payload) VALUES (%s, 'pull_request',"
                " 'pytorch/pytorch', 'synchronize', %s, %s, %s, %s, %s, 'main', '', '[]', %s,"
                " %s, %s) RETURNING id",
                (
                    delivery_id,
                    number,
                    f"PR {number}",
                    "bench-author",
                    sha,
                    "b" * 40,
                    now,
                    f"{index:064x}",
                    Jsonb(payload),
                ),
            ).fetchone()[0]
            for downstream_id in ids:
                conn.execute(
                    "INSERT INTO hud_dispatch (delivery_id, downstream_id, level_at_dispatch,"
                    " created_at, dispatched_at, outcome, reason, attempts, trimmed_fields)"
                    " VALUES (%s, %s, 2, %s, %s, 'sent', '', 1, '[]')",
                    (delivery_pk, downstream_id, now, now),
                )


def count_rows(url: str, tag: str) -> tuple[int, int, int]:
    """(jobs, completed jobs, failed-test rows) written for jobs named `<tag>-…`."""
    with psycopg.connect(url) as conn:
        jobs, completed = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM hud_job"
            " WHERE job_name LIKE %s",
            (f"{tag}-%",),
        ).fetchone()
        tests = conn.execute(
            "SELECT count(*) FROM hud_failedtest t JOIN hud_job j ON j.id = t.job_id"
            " WHERE j.job_name LIKE %s",
            (f"{tag}-%",),
        ).fetchone()[0]
    return jobs, completed, tests


# --- The full path: gunicorn + Django ----------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gunicorn_workers() -> tuple[int, str]:
    """The documented worker count and where it comes from."""
    conf = ROOT / "deploy" / "gunicorn.conf.py"
    if conf.exists():
        namespace: dict[str, Any] = {"__file__": str(conf), "__name__": "gunicorn_conf"}
        saved = dict(os.environ)  # the file may set variables meant for gunicorn's process
        try:
            exec(compile(conf.read_text(), str(conf), "exec"), namespace)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        if isinstance(namespace.get("workers"), int):
            return namespace["workers"], str(conf.relative_to(ROOT))
    return 2 * (os.cpu_count() or 1) + 1, "2 × cores + 1 (no deploy/gunicorn.conf.py)"


def app_environment(url: str, jwks_url: str, cache_url: str | None = None) -> dict[str, str]:
    """The environment the app runs with: production-like, DEBUG off; the workers share a
    Django cache: `cache_url`'s (Redis, as in production) or the embedded default's files."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CRCR_", "DATABASE_", "CACHE_", "CELERY_"))
    }
    env.update(
        DATABASE_URL=url,
        DEBUG="0",
        SECRET_KEY="bench-" + uuid.uuid4().hex,
        ALLOWED_HOSTS="127.0.0.1,localhost",
        CRCR_RATE_LIMIT_PER_MIN=str(RATE_LIMIT_PER_MIN),
        CRCR_OIDC_ISSUER=GITHUB_ISSUER,
        CRCR_OIDC_AUDIENCE=CRCR_AUDIENCE,
        CRCR_OIDC_JWKS_URL=jwks_url,
        CRCR_OIDC_LEEWAY_SECONDS=str(LEEWAY),
        LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    if cache_url:
        env["CACHE_URL"] = cache_url
    else:
        # The embedded default's file cache, shared by the workers, in a folder of its own.
        env["CACHE_DIR"] = tempfile.mkdtemp(prefix="crcr-bench-cache-")
    return env


def start_gunicorn(env: dict[str, str], workers: int) -> tuple[subprocess.Popen, str]:
    """gunicorn on a free port; returns once /readyz answers 200."""
    port = free_port()
    command = [str(Path(PYTHON).parent / "gunicorn"), "config.wsgi:application"]
    conf = ROOT / "deploy" / "gunicorn.conf.py"
    if conf.exists():
        command += ["--config", str(conf)]
    command += ["--workers", str(workers), "--bind", f"127.0.0.1:{port}"]
    # Its log goes to a file, not a pipe: an undrained pipe fills up and blocks the workers.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError("gunicorn exited: " + log.read().decode()[-2000:])
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    return process, base
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("gunicorn did not become ready within 60 s")


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- The floor: the same work, no web framework ------------------------------------------

REPOSITORY_PATTERN = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


class FloorRejected(Exception):
    """What the endpoint would answer with a 4xx."""


def floor_verify(token: str, keys: dict[str, jwt.PyJWK]) -> dict:
    """api.authentication.verify_oidc_token's checks, with PyJWT and the same key."""
    header = jwt.get_unverified_header(token)
    if header.get("alg") != "RS256" or header.get("kid") not in keys:
        raise FloorRejected("401")
    claims = jwt.decode(
        token,
        key=keys[header["kid"]],
        algorithms=["RS256"],
        audience=CRCR_AUDIENCE,
        issuer=GITHUB_ISSUER,
        options={
            "require": ["iss", "iat", "exp", "aud", "repository"],
            "verify_exp": False,
            "verify_iat": False,
            "verify_nbf": False,
        },
    )
    now = time.time()
    if claims["exp"] <= now - LEEWAY or claims["iat"] > now + LEEWAY:
        raise FloorRejected("401")
    if not REPOSITORY_PATTERN.fullmatch(claims["repository"]):
        raise FloorRejected("401")
    return claims


def floor_failed_tests(cursor: psycopg.Cursor, job_id: int, data: Any) -> None:
    """hud.ingestion.ingest's insert of failed tests on PostgreSQL: one UNNEST statement."""
    if data.failed_tests:
        columns = sql.failed_test_columns(job_id, data.failed_tests)
        cursor.execute(sql.INSERT_FAILED_TESTS_UNNEST, columns)


def floor_derived(
    cursor: psycopg.Cursor, downstream_id: int, data: Any, event_type: str, pr: int, sha: str
) -> None:
    """hud.ingestion.ingest's derived-layer upkeep: hud.ingestion.derived's statements here."""
    key = (downstream_id, event_type, sha, data.workflow_name, data.job_name)
    derived.refresh(cursor, "postgresql", key, pr)


def floor_callback(conn: psycopg.Connection, keys: dict, callback: Callback) -> str:
    """One callback through the floor: verify, consume jti, admit, validate, store.

    The statements are hud.models.sql's, in hud.ingestion.ingest's order and in its one
    transaction (the token is spent with the result); the parameters are built
    here, straight from the parsed callback.
    """
    claims = floor_verify(callback.token, keys)
    with conn.transaction(), conn.cursor() as cursor:
        expires = dt.datetime.fromtimestamp(claims["exp"], dt.UTC)
        if not cursor.execute(sql.CONSUME_JTI, (claims["jti"], expires)).rowcount:
            raise FloorRejected("401")
        repo = claims["repository"]
        downstream = cursor.execute(sql.FIND_DOWNSTREAM, (repo.lower(),)).fetchone()
        if downstream is None or downstream[5] or downstream[2] < 2:
            raise FloorRejected("403")
        downstream_id, full_name = downstream[0], downstream[1]
        capacity, per_second = 2.0 * RATE_LIMIT_PER_MIN, RATE_LIMIT_PER_MIN / 60.0
        now = time.time()
        spent = cursor.execute(
            sql.take_rate_token("postgresql"),
            sql.rate_token_params(downstream_id, now, capacity, per_second),
        ).rowcount
        if (
            not spent
        ):  # the first callback of a backend (hud.ingestion.ingest creates the bucket then)
            cursor.execute(
                "INSERT INTO hud_ratebucket (downstream_id, tokens, updated_epoch)"
                " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (downstream_id, capacity - 1.0, now),
            )
        try:
            data = parse_callback(decode_json(callback.body), full_name)
        except PayloadError as error:
            raise FloorRejected("400") from error
        received = dt.datetime.now(dt.UTC)
        completed = data.status == "completed"
        delivery = cursor.execute(sql.FIND_DELIVERY, (downstream_id, data.delivery_id)).fetchone()
        if delivery and (
            (data.head_sha_field and delivery[4] and data.head_sha != delivery[4])
            or (data.pr_number and data.pr_number != delivery[3])
        ):
            raise FloorRejected("400")
        key = (
            downstream_id,
            data.delivery_id,
            data.workflow_name,
            data.job_name,
            data.check_run_id,
        )
        row = cursor.execute(sql.lock_job(True), key).fetchone()
        tests = data.tests
        if row is None:
            queue = None
            if not completed and delivery and delivery[7] and data.run_attempt == 1:
                queue = max((received - delivery[7]).total_seconds(), 0.0)
            values = (
                *key,
                delivery[2] if delivery else data.event_type,
                delivery[3] if delivery else data.pr_number,
                (delivery[4] or data.head_sha) if delivery else data.head_sha,
                delivery[5] if delivery else data.ref,
                delivery[6] if delivery else None,
                delivery is not None,
                "callback",
                data.run_id,
                data.run_attempt,
                data.workflow_url,
                data.status,
                data.conclusion,
                False,
                data.started_at,
                min(data.completed_at, received) if data.completed_at else None,
                None if completed else received,
                received if completed else None,
                received,
                received,
                queue,
                None,
                "server" if queue is not None else "none",
                tests["passed"] if completed else None,
                tests["failed"] if completed else None,
                tests["skipped"] if completed else None,
                tests["total"] if completed else None,
                data.failed_tests_truncated if completed else False,
                data.artifact_url if completed else "",
                Jsonb(data.environment) if completed and data.environment else None,
                Jsonb(data.triage_verdict) if completed and data.triage_verdict else None,
            )
            inserted = cursor.execute(sql.INSERT_JOB, values).fetchone()
            if inserted is None:
                return "raced"
            if completed:
                floor_failed_tests(cursor, inserted[0], data)
            floor_derived(cursor, downstream_id, data, *values[5:8])
            return "created"
        job = dict(zip(("id", *sql.JOB_COLUMNS), row, strict=True))
        if not completed:
            return "duplicate" if job["status"] == "in_progress" else "stale"
        if job["status"] == "completed" and not job["closed_by_sweeper"]:
            if job["conclusion"] == data.conclusion:
                return "duplicate"
            raise FloorRejected("409")
        started = job["in_progress_received_at"]
        execution = max((received - started).total_seconds(), 0.0) if started else None
        job.update(
            status="completed",
            conclusion=data.conclusion,
            closed_by_sweeper=False,
            completed_received_at=received,
            reported_completed_at=min(data.completed_at, received) if data.completed_at else None,
            reported_started_at=job["reported_started_at"] or data.started_at,
            placed_at=received,
            tests_passed=tests["passed"],
            tests_failed=tests["failed"],
            tests_skipped=tests["skipped"],
            tests_total=tests["total"],
            failed_tests_truncated=data.failed_tests_truncated,
            artifact_url=data.artifact_url,
            environment=Jsonb(data.environment) if data.environment else None,
            triage_verdict=Jsonb(data.triage_verdict) if data.triage_verdict else None,
            execution_seconds=job["execution_seconds"] if execution is None else execution,
            timing_source=job["timing_source"] if execution is None else "server",
            updated_at=received,
        )
        params = [job[column] for column in sql.COMPLETION_COLUMNS]
        cursor.execute(sql.COMPLETE_JOB, (*params, job["id"], "completed"))
        if cursor.rowcount == 0:  # completed meanwhile: the SQL guard kept the stored result
            return "duplicate"
        floor_failed_tests(cursor, job["id"], data)
        floor_derived(
            cursor, downstream_id, data, job["event_type"], job["pr_number"], job["head_sha"]
        )
        return "updated"


def _http_callback(address: tuple[str, int], request: bytes) -> str:
    """One callback through the real endpoint; its answer as `<status> <outcome>`.

    The load generator shares the 2 cores with the server, so it is kept lean: the request
    bytes are built before timing and sent on a plain socket (gunicorn's sync workers close
    every connection anyway). Against a trivial WSGI app in the same gunicorn this costs
    0.42 ms of CPU per request, http.client 0.57 ms and httpx 1.86 ms.
    """
    with socket.create_connection(address, timeout=120) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, raw = b"".join(chunks).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    body = json.loads(raw) if status < 500 else {}
    return f"{status} {body.get('status') or body.get('error')}"


def _driver_process(
    kind: str, target: str, jwk: dict, slices: list, ready: Any, start: Any, results: Any
) -> None:
    """One driver process: a thread per slice of jobs, each with its own HTTP client (kind
    "http", target = base URL) or its own psycopg connection (kind "floor", target = DB URL).
    """
    keys = {jwk["kid"]: jwt.PyJWK(jwk, algorithm="RS256")}
    if kind == "http":
        address = urllib.parse.urlsplit(target)
        handles: list[Any] = [(address.hostname, address.port) for _ in slices]
    else:
        handles = [psycopg.connect(target, autocommit=True) for _ in slices]
    outcomes: Counter = Counter()
    lock = threading.Lock()

    def run(index: int) -> None:
        local: Counter = Counter()
        start.wait()
        for job in slices[index]:
            for callback in job:
                try:
                    if kind == "http":
                        local[_http_callback(handles[index], callback.request)] += 1
                    else:
                        local[f"200 {floor_callback(handles[index], keys, callback)}"] += 1
                except FloorRejected as error:
                    local[f"{error} rejected"] += 1
                except Exception as error:  # counted, so a broken run shows instead of hanging
                    local[f"error {type(error).__name__}"] += 1
        with lock:
            outcomes.update(local)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(slices))]
    for thread in threads:
        thread.start()
    ready.release()
    for thread in threads:
        thread.join()
    for handle in handles if kind == "floor" else ():
        handle.close()
    results.put(dict(outcomes))


def drive(
    kind: str, target: str, jwk: dict, jobs: list, concurrency: int, processes: int
) -> tuple[float, Counter]:
    """Run the jobs on `concurrency` threads spread over `processes` driver processes.

    Both paths are driven the same way, so neither pays for a client the other does not
    have (one GIL-bound client process would cap the HTTP path on a busy 2-core machine).
    """
    context = multiprocessing.get_context("fork")
    slices = [jobs[index::concurrency] for index in range(concurrency)]
    per_process = [slices[index::processes] for index in range(processes)]
    per_process = [group for group in per_process if group]
    ready, start, results = context.Semaphore(0), context.Event(), context.Queue()
    workers = [
        context.Process(
            target=_driver_process, args=(kind, target, jwk, group, ready, start, results)
        )
        for group in per_process
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.acquire()
    started = time.perf_counter()
    start.set()
    outcomes: Counter = Counter()
    for _ in workers:
        outcomes.update(results.get())
    elapsed = time.perf_counter() - started
    for worker in workers:
        worker.join()
    return elapsed, outcomes


# --- Answer → visible ---------------------------------------------------------------------


def measure_visibility(base: str, issuer: OidcIssuer, samples: int) -> dict[str, list[float]]:
    """Seconds from a completed callback's 200 to the job showing in the API and the page."""
    results: dict[str, list[float]] = {"api": [], "page": [], "api_reads": [], "page_reads": []}
    org, repo = LATENCY_BACKEND.split("/")
    page_status = None
    with httpx.Client(base_url=base, timeout=30) as client:
        run_ids = itertools.count(900_000_000)

        def post_pair(name: str) -> float:
            """in_progress then completed for a new job; when the completed one was answered."""
            run_id = next(run_ids)
            for status in ("in_progress", "completed"):
                body = callback_body(LATENCY_BACKEND, run_id % DELIVERIES, run_id, name, status, 2)
                response = client.post(
                    "/github/callback",
                    content=json.dumps(body).encode(),
                    headers={"Authorization": f"Bearer {issuer.mint(LATENCY_BACKEND)}"},
                )
                answered = time.perf_counter()
                assert response.status_code == 200, response.text
            return answered

        for index in range(samples):
            name = f"latency-{index}-{uuid.uuid4().hex[:6]}"
            answered = post_pair(name)
            deadline = answered + 60
            reads = 0
            while time.perf_counter() < deadline:
                reads += 1
                rows = client.get(
                    "/api/v1/jobs", params={"downstream": LATENCY_BACKEND, "job_name": name}
                ).json()["results"]
                if rows and rows[0]["status"] == "completed":
                    results["api"].append(time.perf_counter() - answered)
                    results["api_reads"].append(reads)
                    break
            # Its own sample: a completed callback answered, then the page read until it shows.
            answered_page, reads = post_pair(name + "-page"), 0
            while time.perf_counter() < deadline + 60:
                reads += 1
                page = client.get(f"/crcr/{org}/{repo}")
                page_status = page.status_code
                if page.status_code == 404:
                    break
                if f"{name}-page" in page.text:
                    results["page"].append(time.perf_counter() - answered_page)
                    results["page_reads"].append(reads)
                    break
    results["page_status"] = [page_status or 0]
    return results


# --- Profile (pyinstrument, in-process) --------------------------------------------------


def profile(url: str, jwks_url: str, issuer: OidcIssuer, failures: int, count: int) -> None:
    """Run the Django path in-process under pyinstrument (`profile_child`) and print the
    profile. The child is a process of its own: this one's Django read its settings at import,
    before the database and the JWKS server existed."""
    jobs = prepare_jobs(issuer, f"profile{failures}", count, failures, 700_000_000)
    with tempfile.NamedTemporaryFile(suffix=".json", mode="w") as prepared:
        json.dump([[[c.token, c.body.decode()] for c in job] for job in jobs], prepared)
        prepared.flush()
        subprocess.run(
            [PYTHON, __file__, "--profile-jobs", prepared.name],
            cwd=ROOT,
            env=app_environment(url, jwks_url),
            check=True,
        )


def profile_child(path: str) -> None:
    """`profile`'s child: post the prepared jobs through Django's test client, warm first."""
    from django.test import Client
    from pyinstrument import Profiler

    client = Client(SERVER_NAME="localhost")
    with open(path) as prepared:
        jobs = [
            [Callback(token, body.encode()) for token, body in job] for job in json.load(prepared)
        ]

    def post(some_jobs: list[list[Callback]]) -> None:
        for job in some_jobs:
            for callback in job:
                response = client.post(
                    "/github/callback",
                    callback.body,
                    content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {callback.token}",
                )
                if response.status_code != 200:
                    raise SystemExit(
                        f"callback answered {response.status_code}: {response.content!r}"
                    )

    post(jobs[:5])  # warm: JWKS fetched, connection open, statements prepared
    profiler = Profiler(interval=0.0005)
    profiler.start()
    post(jobs[5:])
    profiler.stop()
    print(
        profiler.output_text(
            unicode=True, color=False, show_all=os.environ.get("PROFILE_ALL") == "1"
        )
    )


# --- Main --------------------------------------------------------------------------------


def summary(latencies: list[float]) -> str:
    """median / p95 / max in milliseconds."""
    if not latencies:
        return "no samples"
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (
        f"median {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms over {len(ordered)} callbacks"
    )


def main() -> int:
    """Run the benchmark (or the profile) and print the figures."""
    sys.stdout.reconfigure(line_buffering=True)
    # SIGTERM cleans up like Ctrl-C: gunicorn stopped, the database dropped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--jobs", type=int, default=600, help="jobs per round at 0/20 failures")
    parser.add_argument("--jobs-large", type=int, default=40, help="jobs per round at 1,000")
    parser.add_argument("--sizes", default="0,20,1000")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; best kept")
    parser.add_argument("--latency-samples", type=int, default=50)
    parser.add_argument("--profile", type=int, metavar="FAILED_TESTS", default=None)
    parser.add_argument("--profile-jobs", help=argparse.SUPPRESS)  # `profile`'s child
    parser.add_argument(
        "--cache-url", help="Django cache for the workers (e.g. redis://127.0.0.1:6379/3)"
    )
    args = parser.parse_args()
    if args.profile_jobs:
        profile_child(args.profile_jobs)
        return 0

    url = f"{args.pg}/{DB_NAME}"
    create_database(args.pg)
    server = JwksServer()
    server.start()
    keys = [
        SigningKey(kid=f"bench-key-{i}", private_key=rsa.generate_private_key(65537, 2048))
        for i in range(3)
    ]
    names = SimpleNamespace(CRCR_OIDC_ISSUER=GITHUB_ISSUER, CRCR_OIDC_AUDIENCE=CRCR_AUDIENCE)
    issuer = OidcIssuer(server, keys, names)
    env = app_environment(url, server.url, args.cache_url)
    gunicorn = None
    try:
        subprocess.run(
            [PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
        )
        seed(url)
        if args.profile is not None:
            profile(url, server.url, issuer, args.profile, 200 if args.profile < 100 else 30)
            return 0
        workers, source = gunicorn_workers()
        gunicorn, base = start_gunicorn(env, workers)
        print(
            f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; "
            f"PostgreSQL {args.pg} (database {DB_NAME})"
        )
        print(f"gunicorn: {workers} workers ({source}); DEBUG off")
        print(f"CRCR_RATE_LIMIT_PER_MIN={RATE_LIMIT_PER_MIN} (never limits this run)")
        print(
            f"concurrency {args.concurrency}: both paths = {args.concurrency} threads over "
            f"{workers} driver processes; HTTP: prebuilt requests on a plain socket, one "
            "connection per request (sync workers close them); floor: a psycopg connection "
            "per thread"
        )
        run_ids = itertools.count(1_000_000, 100_000)
        # Warm every gunicorn worker (JWKS fetched, connection open) and the floor code.
        warm = prepare_jobs(issuer, "warm", 4 * workers, 0, next(run_ids))
        drive("http", base, issuer.current.jwk(), warm, args.concurrency, workers)
        ok = True
        for size in (int(s) for s in args.sizes.split(",")):
            count = args.jobs_large if size >= 100 else args.jobs
            best = {"http": None, "floor": None}
            for round_index in range(args.rounds):
                for path in ("http", "floor") if round_index % 2 == 0 else ("floor", "http"):
                    tag = f"{path}{size}r{round_index}"
                    jobs = prepare_jobs(issuer, tag, count, size, next(run_ids))
                    seconds, outcomes = drive(
                        path,
                        base if path == "http" else url,
                        issuer.current.jwk(),
                        jobs,
                        args.concurrency,
                        workers,
                    )
                    rate = 2 * count / seconds
                    stored = count_rows(url, tag)
                    expected = {"200 created": count, "200 updated": count}
                    correct = dict(outcomes) == expected and stored == (count, count, count * size)
                    ok &= correct
                    print(
                        f"  {size:>4} failed tests, {path:<5} round {round_index + 1}: "
                        f"{2 * count} callbacks in {seconds:.2f} s = {rate:.1f}/s; "
                        f"answers {dict(outcomes)}; rows {stored}"
                        + ("" if correct else "  <-- UNEXPECTED")
                    )
                    best[path] = max(best[path] or 0.0, rate)
            print(
                f"{size} failed tests: ingest {best['http']:.1f} callbacks/s, "
                f"floor {best['floor']:.1f} callbacks/s"
            )
            print(f"ingest/floor ratio: {best['http'] / best['floor']:.2f} ({size} failed tests)")
        latency = measure_visibility(base, issuer, args.latency_samples)
        print(
            f"answer → visible in GET /api/v1/jobs: {summary(latency['api'])}; reads needed: "
            f"{dict(Counter(latency['api_reads']))}"
        )
        if latency["page_status"][0] == 404:
            print(f"answer → visible on /crcr/{LATENCY_BACKEND}: page answers 404 (not built)")
        else:
            print(
                f"answer → visible on /crcr/{LATENCY_BACKEND}: {summary(latency['page'])}; "
                f"reads needed: {dict(Counter(latency['page_reads']))}"
            )
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
        return 0 if ok else 1
    finally:
        if gunicorn is not None:
            stop_process(gunicorn)
        server.stop()
        drop_database(args.pg)
        if "CACHE_DIR" in env:
            shutil.rmtree(env["CACHE_DIR"], ignore_errors=True)
        shutil.rmtree(ROOT / "bench" / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
