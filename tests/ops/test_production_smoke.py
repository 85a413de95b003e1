"""The documented production set-up, end to end: gunicorn, a Celery worker and beat on Redis.

Each process starts with the one command the docs and units give (tests/ops/test_deploy.py,
START), on the test database, against the fake GitHub and a local JWKS. A signed webhook is
dispatched by the worker, the L4 backend's callbacks arrive over HTTP with OIDC tokens, and
the worker mirrors the job and the `crcr/gate` onto the PR; the worker's pool process is
killed once while a check run is being created. Everything must converge, each check run
exactly once, and every line each process wrote must be JSON.
"""

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from hud.models import CheckRunMirror, GateCheck, Level
from tests.ops.test_deploy import CELERY, GUNICORN, START, _free_port, production_env
from tests.relay.conftest import UPSTREAM, fixture_body, new_guid, sign
from tests.relay.test_worker import REDIS_URL, ROOT, _database_url, _pool_child, _wait_for
from tests.support import builders
from tests.support.fake_github import Canned

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not REDIS_URL, reason="CRCR_TEST_REDIS_URL is not set"),
]
SECRET = "smoke-webhook-secret"
L4 = "org4/repo4"
HTTPS = {"X-Forwarded-Proto": "https"}  # as the TLS proxy says


def _http(base: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, dict]:
    """One request to gunicorn: (status, JSON answer)."""
    request = urllib.request.Request(
        base + path, data=body, headers={**HTTPS, "Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _start(command: str, env: dict, log: Path) -> subprocess.Popen:
    """Start one documented command (its binary from this virtualenv), output to `log`."""
    binary, *args = command.split()
    executable = {"gunicorn": GUNICORN, "celery": CELERY}[binary]
    with log.open("wb") as output:
        return subprocess.Popen(
            [executable, *args], cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
        )


@pytest.mark.django_db(transaction=True)
def test_webhook_to_gate_converges_through_gunicorn_worker_and_beat(fake_github, oidc, tmp_path):
    started = time.monotonic()
    backend = builders.downstream(L4, Level.L4)
    fake_github.install(L4)
    app = fake_github.default_app
    bind = f"127.0.0.1:{_free_port()}"
    env = {
        "PATH": os.environ["PATH"],
        **production_env(
            ALLOWED_HOSTS="127.0.0.1",
            DATABASE_URL=_database_url(),
            CELERY_BROKER_URL=REDIS_URL,
            CACHE_URL=REDIS_URL,
            GITHUB_API_URL=fake_github.url,
            GITHUB_APP_ID=str(app.app_id),
            GITHUB_APP_PRIVATE_KEY=app.private_key_pem,
            GITHUB_TIMEOUT="5",
            GITHUB_WEBHOOK_SECRET=SECRET,
            CRCR_UPSTREAM_REPO=UPSTREAM,
            CRCR_OIDC_JWKS_URL=oidc.jwks_url,
            GUNICORN_WORKERS="2",
            GUNICORN_BIND=bind,
            PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prometheus"),
        ),
    }
    base = f"http://{bind}"
    logs = {name: tmp_path / f"{name}.log" for name in START}
    # The first check run GitHub is asked for answers late: the worker dies while it waits.
    fake_github.enqueue("POST", f"/repos/{UPSTREAM}/check-runs", Canned.slow(2.0))
    processes = {
        "web": _start(START["web"], env, logs["web"]),
        # One pool process (as CELERY_CONCURRENCY=1 in the unit): the one to kill mid-task.
        "worker": _start(f"{START['worker']} --concurrency=1", env, logs["worker"]),
    }
    processes["beat"] = _start(
        f"{START['beat']} --schedule={tmp_path / 'beat-schedule'}", env, logs["beat"]
    )
    try:
        assert _wait_for(lambda: b"ready." in logs["worker"].read_bytes()), logs["worker"]
        assert _wait_for(lambda: b"Booting worker" in logs["web"].read_bytes())
        assert _wait_for(lambda: _http(base, "/readyz")[0] == 200)

        guid, body = new_guid(), fixture_body("pull_request.opened")
        sha = body["pull_request"]["head"]["sha"]
        raw = json.dumps(body).encode()
        status, answer = _http(
            base,
            "/github/webhook",
            raw,
            **{
                "X-GitHub-Event": "pull_request",
                "X-GitHub-Delivery": guid,
                "X-Hub-Signature-256": sign(raw, SECRET),
            },
        )
        assert (status, answer["status"]) == (200, "dispatched")
        assert _wait_for(lambda: [d["repository"] for d in fake_github.dispatches] == [L4])

        def callback(**fields: str) -> dict:
            payload = builders.callback_body(L4, delivery_id=guid, payload=body, **fields)
            token = {"Authorization": f"Bearer {oidc.mint(L4)}"}
            return _http(base, "/github/callback", json.dumps(payload).encode(), **token)

        status, started_job = callback(job_name="test")
        assert (status, started_job["status"]) == (200, "created")

        def creating() -> bool:  # a create on the wire: the row knows it asked, not the answer
            return any(
                model.objects.filter(create_attempted_at__isnull=False, check_run_id=None).exists()
                for model in (CheckRunMirror, GateCheck)
            )

        assert _wait_for(creating), logs["worker"].read_text()[-3000:]
        os.kill(_pool_child(processes["worker"].pid), signal.SIGKILL)

        status, finished = callback(job_name="test", status="completed", conclusion="success")
        assert (status, finished["status"]) == (200, "updated")

        def converged() -> bool:
            gate = _http(base, f"/api/v1/gate/{sha}")[1]
            runs = {run["name"]: run for run in fake_github.check_runs_for(UPSTREAM, sha)}
            job_run = runs.get(f"crcr/{L4}/{finished_workflow_name}/test", {})
            return (
                gate.get("state") == "success"
                and gate["check_run"]["sync"] == "sent"
                and job_run.get("conclusion") == "success"
                and runs.get("crcr/gate", {}).get("conclusion") == "success"
            )

        finished_workflow_name = builders.callback_body(L4)["workflow"]["name"]
        assert _wait_for(converged), logs["worker"].read_text()[-3000:]
        assert processes["beat"].poll() is None and processes["web"].poll() is None
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    names = [run["name"] for run in fake_github.check_runs_for(UPSTREAM, sha)]
    assert sorted(names) == sorted(set(names)), names  # no duplicate check run
    assert len(names) == 2
    assert CheckRunMirror.objects.get(job__downstream=backend).writes <= 2
    for name, log in logs.items():
        for line in log.read_text().splitlines():
            assert json.loads(line)["level"], (name, line)
    assert time.monotonic() - started < 120
