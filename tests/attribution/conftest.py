"""Histories with a known cause, stored through the real ingestion service."""

import datetime as dt
import hashlib
import itertools

import pytest

from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Job, Level
from tests.conftest import NOW
from tests.support import builders

HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
_run_ids = itertools.count(10_000)


def sha(label: str) -> str:
    """A deterministic 40-hex SHA for a label."""
    return hashlib.sha1(label.encode()).hexdigest()


def failed(name: str, classname: str = "test_ops.TestOps", message: str = "assert 1 == 2") -> dict:
    """A failed test as the action reports it."""
    return {"name": name, "classname": classname, "message": message, "stacktrace": "Traceback"}


class History:
    """Stores completed jobs at chosen moments, moving the frozen clock."""

    def __init__(self, clock) -> None:
        self.clock = clock

    def backend(self, repo: str, level: int = Level.L2) -> None:
        """Allowlist a backend."""
        builders.downstream(repo, level)

    def job(
        self,
        repo: str,
        *,
        at: dt.datetime,
        head: str,
        event: str = "pull_request",
        pr: int = 0,
        job: str = "test-ops",
        conclusion: str = "failure",
        tests: list[dict] | None = None,
        run_id: int | None = None,
        attempt: int = 1,
        counts: dict | None = None,
        **extra,
    ) -> int:
        """One completed attempt (`counts={}`: no test counts reported); returns the job id."""
        payload, delivery = builders.upstream_event(event, head, pr)
        tests = tests or []
        if counts is None:
            counts = {"passed": 100, "failed": len(tests), "skipped": 0}
            counts["total"] = counts["passed"] + counts["failed"]
        self.clock.set(at)
        body = builders.callback_body(
            repo,
            status="completed",
            conclusion=conclusion,
            delivery_id=delivery,
            payload=payload,
            event_type=event,
            run_id=run_id or next(_run_ids),
            run_attempt=attempt,
            job_name=job,
            failed_tests=tests,
            **({"test_results": counts} if counts else {}),
            **extra,
        )
        backend = builders.Downstream.objects.get(full_name=repo)
        outcome = ingest.store(backend, parse_callback(body, repo), source=Job.Source.CALLBACK)
        self.clock.set(NOW)
        return outcome.job_id

    def passes_elsewhere(self, repo: str, count: int = 4, job: str = "test-ops") -> None:
        """`count` green trunk pushes of `job` in the days before: enough runs to judge on."""
        for index in range(count):
            self.job(
                repo,
                at=NOW - (index + 2) * DAY,
                head=sha(f"green-{repo}-{job}-{index}"),
                event="push",
                job=job,
                conclusion="success",
            )


@pytest.fixture
def history(db, frozen_clock) -> History:
    """A history builder on the frozen clock."""
    return History(frozen_clock)
