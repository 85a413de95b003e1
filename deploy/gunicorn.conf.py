"""gunicorn settings for CRCR HUD: `gunicorn -c deploy/gunicorn.conf.py config.wsgi`.

Every value can be overridden from the environment (GUNICORN_*; WEB_CONCURRENCY is honoured
too). gunicorn's own lines go through Django's LOGGING (config/settings.py), as the web app's
and Celery's do: JSON objects, one per line, on stderr; access lines are JSON objects on
stdout, carrying the request id.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gunicorn.glogging import Logger


def _int(name: str, default: int) -> int:
    """An integer from the environment, or the default."""
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


# --- Sockets and processes -----------------------------------------------------------------
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# Sync workers: requests are short database reads and writes; 2 × cores + 1 keeps the CPUs
# busy while some workers wait on PostgreSQL.
workers = _int("GUNICORN_WORKERS", _int("WEB_CONCURRENCY", 2 * multiprocessing.cpu_count() + 1))
threads = _int("GUNICORN_THREADS", 1)
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "sync")
# A request may run this long (a large CSV export, a 25 MB webhook) before the worker is killed.
timeout = _int("GUNICORN_TIMEOUT", 60)
graceful_timeout = _int("GUNICORN_GRACEFUL_TIMEOUT", 30)
keepalive = _int("GUNICORN_KEEPALIVE", 5)
# Recycle workers now and then so a slow leak never grows without bound.
max_requests = _int("GUNICORN_MAX_REQUESTS", 2000)
max_requests_jitter = _int("GUNICORN_MAX_REQUESTS_JITTER", 200)
# Only the reverse proxy may set X-Forwarded-* (Django reads X-Forwarded-Proto via
# SECURE_PROXY_SSL_HEADER when CRCR_BEHIND_TLS_PROXY=1).
forwarded_allow_ips = os.environ.get("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
_SHM = "/dev/shm"  # noqa: S108 - gunicorn's own heartbeat files, created per worker
if Path(_SHM).is_dir():
    # The heartbeat file on tmpfs: a slow disk must not make the master kill healthy workers.
    worker_tmp_dir = _SHM

# --- Logs ---------------------------------------------------------------------------------
accesslog = os.environ.get("GUNICORN_ACCESSLOG", "-")
errorlog = os.environ.get("GUNICORN_ERRORLOG", "-")
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "info")


class JsonAccessLogger(Logger):
    """Logs each answer as one record of `gunicorn.access` (no query string: never logged)."""

    def access(self, resp: Any, req: Any, environ: dict, request_time: Any) -> None:
        """One line per answer: method, path, status, bytes, duration, request id."""
        if not self.cfg.accesslog:
            return
        status = resp.status.split(None, 1)[0] if isinstance(resp.status, str) else resp.status
        headers = {name.lower(): value for name, value in (resp.headers or [])}
        fields = {
            "remote": environ.get("REMOTE_ADDR", "-"),
            "forwarded_for": environ.get("HTTP_X_FORWARDED_FOR"),
            "method": environ.get("REQUEST_METHOD"),
            "path": environ.get("PATH_INFO"),
            "status": int(status),
            "bytes": getattr(resp, "sent", None),
            "duration_ms": request_time.seconds * 1000 + request_time.microseconds // 1000,
            "request_id": headers.get("x-request-id"),
            "user_agent": environ.get("HTTP_USER_AGENT"),
        }
        try:
            self.access_log.info("request", extra=fields)
        except Exception:  # a log line must never fail a request
            self.error("could not write an access line")


def _logconfig() -> dict[str, Any]:
    """Django's LOGGING plus gunicorn's two loggers: errors on stderr, answers on stdout."""
    from config import settings as django_settings  # the one logging configuration

    config = copy.deepcopy(django_settings.LOGGING)
    config["handlers"]["stdout"] = {**config["handlers"]["stderr"], "stream": "ext://sys.stdout"}
    config["loggers"]["gunicorn.error"] = {
        "level": loglevel.upper(),
        "handlers": ["stderr"],
        "propagate": False,
    }
    config["loggers"]["gunicorn.access"] = {
        "level": "INFO",
        "handlers": ["stdout"],
        "propagate": False,
    }
    return config


logconfig_dict = _logconfig()
logger_class = JsonAccessLogger

# --- Prometheus counters across workers ----------------------------------------------------
# Each worker writes its counters to files in this folder and GET /metrics adds them up (see
# hud/ops/metrics.py). Set before any worker imports prometheus_client; emptied at each start.
_OWN_METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR" not in os.environ
os.environ.setdefault(
    "PROMETHEUS_MULTIPROC_DIR",
    str(Path(tempfile.gettempdir()) / f"crcr-prometheus-{os.getpid()}"),
)
# Imported here, once the folder is set, not inside child_exit: that runs in a signal handler,
# and two workers exiting together re-entered a half-done import (ImportError, plain text).
from prometheus_client import multiprocess  # noqa: E402


def on_starting(server: Any) -> None:
    """Start with an empty counter folder (old files would add stale counts)."""
    folder = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    """Tell prometheus-client a worker is gone (its counters stay counted)."""
    multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    """Remove the counter folder this configuration made up (not one the operator chose)."""
    if _OWN_METRICS_DIR:
        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
