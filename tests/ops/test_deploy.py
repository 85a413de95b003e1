"""Production settings and the shipped deployment files (deploy/), exercised for real."""

import http.client
import json
import multiprocessing
import os
import re
import runpy
import secrets
import shelve
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

from tests.ops.conftest import ROOT, run_manage

DEPLOY = ROOT / "deploy"
GUNICORN = str(Path(sys.executable).parent / "gunicorn")
PRODUCTION_ENV = {
    "DEBUG": "0",
    "ALLOWED_HOSTS": "hud.example.org",
    "CRCR_BEHIND_TLS_PROXY": "1",
    "CSRF_TRUSTED_ORIGINS": "https://hud.example.org",
}


CHECK_DEPLOY_OUTPUT = "System check identified no issues (1 silenced)."


def production_env(**extra: str) -> dict[str, str]:
    """The documented production variables with a fresh 50+ character secret key."""
    return {**PRODUCTION_ENV, "SECRET_KEY": secrets.token_urlsafe(64), **extra}


# --- manage.py check --deploy --------------------------------------------------------------


def test_check_deploy_is_clean_with_the_documented_production_settings():
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    # Exactly what the docs tell the operator to expect (the one silenced: HSTS preload).
    assert result.stdout == f"{CHECK_DEPLOY_OUTPUT}\n"
    assert f"`{CHECK_DEPLOY_OUTPUT}`" in (ROOT / "docs" / "operations.md").read_text()


def test_check_deploy_is_clean_against_postgresql_and_redis_too():
    env = production_env(
        DATABASE_URL="postgres://crcr:pw@127.0.0.1:5432/crcr",
        CELERY_BROKER_URL="redis://127.0.0.1:6379/0",
        CACHE_URL="redis://127.0.0.1:6379/1",
    )
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_deploy_still_flags_a_weak_secret_key():
    env = {**production_env(), "SECRET_KEY": "short"}
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "security.W009" in result.stderr


def test_production_without_a_secret_key_refuses_to_start():
    env = {**PRODUCTION_ENV, "DATABASE_URL": "postgres://crcr:pw@127.0.0.1:5432/crcr"}
    result = run_manage("check", env=env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY" in result.stderr


@pytest.mark.parametrize(("value", "threshold"), [(None, "5"), ("0", "None")])
def test_postgresql_prepares_statements_unless_told_not_to(value, threshold):
    env = production_env(DATABASE_URL="postgres://crcr:pw@127.0.0.1:5432/crcr")
    if value is not None:
        env["DATABASE_PREPARED_STATEMENTS"] = value
    show = "from django.conf import settings as s; o = s.DATABASES['default']['OPTIONS']; "
    show += "print(o['server_side_binding'], o['prepare_threshold'])"
    result = run_manage("shell", "--no-imports", "-c", show, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", threshold]


def test_the_embedded_default_needs_no_environment_at_all():
    result = run_manage("check", env={})
    assert result.returncode == 0, result.stderr


def test_the_embedded_default_shares_its_cache_between_processes(tmp_path):
    """The server, `run_periodic` and `seed_demo` are separate processes: a revision token, a
    lease or a kept gate one writes, the others read (production shares Redis)."""
    env = {"CACHE_DIR": str(tmp_path / "cache")}
    write = "from django.core.cache import cache; cache.set('crcr:probe', 'from-writer', None)"
    read = "from django.core.cache import cache; print(cache.get('crcr:probe'))"
    assert run_manage("shell", "--no-imports", "-c", write, env=env).returncode == 0
    result = run_manage("shell", "--no-imports", "-c", read, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["from-writer"]


def test_a_secret_key_file_is_read_like_the_variable(tmp_path):
    key_file = tmp_path / "secret_key"
    key_file.write_text(secrets.token_urlsafe(64) + "\n")
    env = {
        **PRODUCTION_ENV,
        "DATABASE_URL": "postgres://crcr:pw@127.0.0.1:5432/crcr",
        "SECRET_KEY_FILE": str(key_file),
    }
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stderr


# --- gunicorn --------------------------------------------------------------------------------


def _gunicorn_settings(monkeypatch, **env: str) -> dict:
    for name in ("GUNICORN_WORKERS", "WEB_CONCURRENCY", "GUNICORN_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/nonexistent-not-created-by-reading")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))


def test_gunicorn_workers_default_to_twice_the_cores_plus_one(monkeypatch):
    config = _gunicorn_settings(monkeypatch)
    assert config["workers"] == 2 * multiprocessing.cpu_count() + 1
    assert config["timeout"] == 60
    assert config["bind"] == "127.0.0.1:8000"


def test_gunicorn_settings_are_overridden_from_the_environment(monkeypatch):
    config = _gunicorn_settings(
        monkeypatch, GUNICORN_WORKERS="3", GUNICORN_TIMEOUT="90", GUNICORN_BIND="0.0.0.0:9000"
    )
    assert (config["workers"], config["timeout"], config["bind"]) == (3, 90, "0.0.0.0:9000")
    assert _gunicorn_settings(monkeypatch, WEB_CONCURRENCY="4")["workers"] == 4


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str, headers: dict | None = None, data: bytes | None = None):
    """One request without following redirects: (status, headers, body)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request("POST" if data is not None else "GET", parts.path, data, headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_gunicorn_serves_with_two_workers_json_access_lines_and_summed_counters(tmp_path):
    """The real thing: gunicorn with deploy/gunicorn.conf.py, two workers, one SQLite file."""
    env = production_env(
        DATABASE_URL=f"sqlite:///{tmp_path / 'hud.sqlite3'}",
        ALLOWED_HOSTS="hud.example.org,127.0.0.1",
        GUNICORN_WORKERS="2",
        GUNICORN_BIND=f"127.0.0.1:{_free_port()}",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prometheus"),
        METRICS_TOKEN="scrape-token",
        CACHE_DIR=str(tmp_path / "cache"),
    )
    migrated = run_manage("migrate", "--noinput", env=env)
    assert migrated.returncode == 0, migrated.stderr
    base = f"http://{env['GUNICORN_BIND']}"
    process = subprocess.Popen(
        [GUNICORN, "-c", "deploy/gunicorn.conf.py", "config.wsgi"],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        https = {"X-Forwarded-Proto": "https"}
        for _ in range(100):
            try:
                if _get(base + "/healthz", https)[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("gunicorn did not start")

        # Behind the proxy: plain HTTP is redirected, health checks are not.
        assert _get(base + "/crcr")[0] == 301
        assert _get(base + "/readyz")[0] == 200
        for _ in range(20):
            status, headers, _ = _get(base + "/healthz", {**https, "X-Request-ID": "probe-1"})
            assert status == 200
            assert headers["X-Request-ID"] == "probe-1"
        refused = _get(base + "/github/callback", https, data=b"{}")
        assert refused[0] == 401

        assert _get(base + "/metrics", https)[0] == 401
        status, _, body = _get(base + "/metrics", {**https, "Authorization": "Bearer scrape-token"})
        assert status == 200
        text = body.decode()
        # Twenty health checks went to either worker; the scrape adds both workers up.
        assert _metric(text, "crcr_http_responses_total", route="healthz", code="200") >= 21
        assert _metric(text, "crcr_ingest_total", endpoint="callback", outcome="invalid_token") == 1
        assert _metric(text, "crcr_database_up") == 1
        assert _metric(text, "crcr_task_queue_depth", backend="inprocess") == 0
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    # Every line of both streams is one JSON object: the access log and gunicorn's own.
    access = [json.loads(line) for line in out.splitlines()]
    probes = [line for line in access if line.get("request_id") == "probe-1"]
    assert len(probes) == 20
    assert probes[0]["path"] == "/healthz" and probes[0]["status"] == 200
    assert {line["logger"] for line in access} == {"gunicorn.access"}
    errors = [json.loads(line) for line in err.splitlines()]
    booted = [line for line in errors if line["message"].startswith("Booting worker")]
    assert len(booted) == 2 and booted[0]["logger"] == "gunicorn.error"


# --- The other files ---------------------------------------------------------------------


def test_the_env_example_holds_no_real_secret():
    lines = [
        line
        for line in (DEPLOY / "env.example").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    values = dict(line.split("=", 1) for line in lines)
    for name in ("SECRET_KEY", "HUD_BOT_KEY", "METRICS_TOKEN", "POSTGRES_PASSWORD"):
        assert values[name] == "CHANGE-ME"
    assert "CHANGE-ME@" in values["DATABASE_URL"]
    assert values["DEBUG"] == "0" and values["CRCR_BEHIND_TLS_PROXY"] == "1"


def test_compose_runs_postgres_redis_web_worker_and_one_beat():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "web", "worker", "beat"} <= set(services)
    assert services["web"]["command"][:3] == ["gunicorn", "-c", "deploy/gunicorn.conf.py"]
    assert " ".join(services["web"]["command"]).startswith(START["web"])
    assert " ".join(services["worker"]["command"]).startswith(START["worker"])
    assert " ".join(services["beat"]["command"]).startswith(START["beat"])
    assert "deploy" not in services["beat"]  # never replicated
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert services[name]["environment"]["DATABASE_URL"].endswith("@postgres:5432/crcr")


def test_systemd_units_start_gunicorn_the_worker_and_beat():
    units = DEPLOY / "systemd"
    web = (units / "crcr-web.service").read_text()
    assert "gunicorn -c deploy/gunicorn.conf.py config.wsgi" in web
    assert "EnvironmentFile=/etc/crcr-hud/env" in web
    assert "celery --quiet -A config worker" in (units / "crcr-worker.service").read_text()
    assert "celery --quiet -A config beat" in (units / "crcr-beat.service").read_text()
    assert "manage.py prune" in (units / "crcr-prune.service").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_units_pass_systemd_analyze_verify(tmp_path):
    # The units name /srv/crcr-hud; point them at this checkout so the binaries exist.
    for unit in (DEPLOY / "systemd").iterdir():
        text = unit.read_text().replace("/srv/crcr-hud", str(ROOT))
        text = re.sub(r"^(User|Group)=crcr$", r"\1=root", text, flags=re.M)
        (tmp_path / unit.name).write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(map(str, tmp_path.iterdir()))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [
        line
        for line in result.stderr.splitlines()
        # No running systemd in a container: only complaints about the units themselves count.
        if "crcr-" in line and "Failed to" not in line and "not running" not in line
    ]
    assert problems == [], result.stderr


def test_nginx_example_forwards_the_scheme_and_sizes_bodies_per_path():
    conf = (DEPLOY / "nginx.conf").read_text()
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in conf
    assert "client_max_body_size 3m;" in conf
    webhook = conf.split("location = /github/webhook", 1)[1].split("}", 1)[0]
    assert "client_max_body_size 26m;" in webhook
    assert "ssl_certificate" in conf and "proxy_read_timeout" in conf


CELERY = str(Path(sys.executable).parent / "celery")


def _run_until(command: list[str], env: dict, tmp_path: Path, name: str, until: str) -> list:
    """Start `command`, wait for `until` in its stderr, stop it with SIGTERM: its lines."""
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
        try:
            deadline = time.monotonic() + 60
            while until not in err.read_text() and time.monotonic() < deadline:
                assert process.poll() is None, err.read_text()
                time.sleep(0.2)
            assert until in err.read_text()
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    return out.read_text().splitlines() + err.read_text().splitlines()


def _celery_env(tmp_path: Path) -> dict[str, str]:
    """Production settings for a worker or beat on an in-memory broker and files in tmp_path."""
    return {
        "PATH": os.environ["PATH"],
        **production_env(CELERY_BROKER_URL="memory://", DATABASE_URL=f"sqlite:///{tmp_path}/db"),
        "CACHE_DIR": str(tmp_path / "cache"),
    }


def test_celery_worker_and_beat_write_only_json_lines(tmp_path):
    """As started by the units: `celery --quiet` then Django's LOGGING, banner-free."""
    env = _celery_env(tmp_path)
    worker = _run_until(
        [CELERY, "--quiet", "-A", "config", "worker", "--pool=solo", "--loglevel=INFO"],
        env,
        tmp_path,
        "worker",
        "ready.",
    )
    beat = _run_until(
        [
            CELERY,
            "--quiet",
            "-A",
            "config",
            "beat",
            "--loglevel=INFO",
            f"--schedule={tmp_path / 'beat-schedule'}",
        ],
        env,
        tmp_path,
        "beat",
        "Starting",
    )
    worker_lines = [json.loads(line) for line in worker]
    assert "worker shutting down" in [line["message"] for line in worker_lines]
    assert any(line["message"].endswith("ready.") for line in worker_lines)
    # Beat may log again between its "Starting" and the SIGTERM (a due task, its pidbox): what
    # matters is that every line is beat's own JSON, the banner gone.
    beat_lines = [json.loads(line) for line in beat]
    assert {line["logger"] for line in beat_lines} == {"celery.beat"}, beat_lines
    assert beat_lines[0]["message"] == "beat: Starting...", beat_lines


def test_beat_stopped_while_building_its_scheduler_exits_cleanly(tmp_path):
    """SIGTERM just after "beat: Starting...": no traceback, the schedule file kept (Celery's
    own handler built the scheduler twice, one inside the other, and removed the file)."""
    env = _celery_env(tmp_path)
    schedule = tmp_path / "beat-schedule"
    command = [CELERY, "--quiet", "-A", "config", "beat", "--loglevel=INFO"]
    scheduler = "--scheduler=tests.ops.term_scheduler:TermWhileBuilt"
    result = subprocess.run(
        [*command, scheduler, f"--schedule={schedule}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in (result.stdout + result.stderr).splitlines()]
    assert [line["message"] for line in lines] == ["beat: Starting...", "schedule opened"]
    assert {line["level"] for line in lines} == {"INFO"}
    with shelve.open(str(schedule), flag="r") as saved:  # saved on the way out, not removed
        assert "crcr.daily_evaluation" in saved["entries"]


# The one way to start each process; units, compose and the docs may only add options.
START = {
    "web": "gunicorn -c deploy/gunicorn.conf.py config.wsgi",
    "worker": "celery --quiet -A config worker --loglevel=INFO",
    "beat": "celery --quiet -A config beat --loglevel=INFO",
}
# A command line (up to a backtick, pipe, quote or the end of the line) run by gunicorn or celery.
COMMAND = re.compile(r"\b(?:gunicorn|celery)(?: +[^\s`|'\\]+)*")


@pytest.mark.parametrize(
    "path",
    [
        "README.md",
        "docs/operations.md",
        "deploy/systemd/crcr-web.service",
        "deploy/systemd/crcr-worker.service",
        "deploy/systemd/crcr-beat.service",
    ],
)
def test_each_process_starts_the_same_way_everywhere(path):
    """Without --quiet Celery prints a plain-text banner; without -c gunicorn runs 1 worker."""
    text = re.sub(r"\s*\\\n\s*", " ", (ROOT / path).read_text())
    if path.endswith(".md"):  # commands, not prose: code blocks and inline code
        text = "\n".join(re.findall(r"```.*?```|`[^`\n]+`", text, re.DOTALL))
    starting = {"config.wsgi", "worker", "beat"}
    commands = [found for found in COMMAND.findall(text) if starting & set(found.split())]
    assert commands
    for command in commands:
        assert any(command.startswith(start) for start in START.values()), command
