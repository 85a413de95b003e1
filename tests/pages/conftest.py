"""Seeded rows for the page tests, stored through the real ingestion service, and a headless
Chromium for the browser tests."""

import datetime as dt

import pytest

from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Job, Level
from tests.conftest import NOW
from tests.support import builders, chromium

DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
UPSTREAM = {"full_name": "pytorch/pytorch"}


@pytest.fixture
def browser():
    """A headless Chromium with its console log readable."""
    if not chromium.installed():
        pytest.skip("chromium and chromium-driver are not installed")
    driver = chromium.driver(log=True)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def sha(label: str) -> str:
    """A deterministic 40-hex SHA for a label."""
    import hashlib

    return hashlib.sha1(label.encode()).hexdigest()


def run(
    clock,
    repo: str,
    *,
    at: dt.datetime,
    minutes: int = 30,
    conclusion: str = "success",
    complete: bool = True,
    **fields,
) -> int:
    """One attempt: in_progress at `at`, completed `minutes` later (unless `complete` is False)."""
    backend = builders.Downstream.objects.get(full_name=repo)
    clock.set(at)
    body = builders.callback_body(repo, status="in_progress", **fields)
    job_id = ingest.store(backend, parse_callback(body, repo), source=Job.Source.CALLBACK).job_id
    if complete:
        clock.set(at + dt.timedelta(minutes=minutes))
        body = builders.callback_body(repo, status="completed", conclusion=conclusion, **fields)
        ingest.store(backend, parse_callback(body, repo), source=Job.Source.CALLBACK)
    clock.set(NOW)
    return job_id


def pr_fields(number: int, head: str, job: str, run_id: int, attempt: int = 1, **extra) -> dict:
    """Callback fields of a pull_request job."""
    return {
        "delivery_id": f"d-{number}-{head[:6]}",
        "payload": builders.pr_payload(number, head),
        "job_name": job,
        "run_id": run_id,
        "run_attempt": attempt,
        **extra,
    }


def nightly_fields(head: str, job: str, run_id: int) -> dict:
    """Callback fields of a nightly self-report."""
    return {
        "delivery_id": head,
        "event_type": "nightly",
        "payload": {"repository": UPSTREAM, "head_sha": head},
        "job_name": job,
        "run_id": run_id,
    }


def failed_test(name: str, message: str = "assert 1 == 2") -> dict:
    """A failed test as the action reports it."""
    return {"name": name, "classname": "TestOps", "message": message, "stacktrace": "…"}


def seed_prs(clock, repo: str, count: int, start_run: int = 1000) -> None:
    """`count` PRs with two jobs each over the last days, one failing test in every third."""
    for index in range(count):
        at = NOW - dt.timedelta(hours=5 + 6 * index)
        head = sha(f"{repo}-{index}")
        for offset, job in enumerate(("build", "test-ops")):
            failing = job == "test-ops" and index % 3 == 0
            run(
                clock,
                repo,
                at=at,
                conclusion="failure" if failing else "success",
                failed_tests=[failed_test("test_add")] if failing else [],
                **pr_fields(170_000 + index, head, job, start_run + 10 * index + offset),
            )


@pytest.fixture
def seeded(db, frozen_clock):
    """Two L2+ backends and one L1; PR jobs, a re-run, a stuck job, a nightly; ids by label."""
    return seed_all(frozen_clock)


def seed_all(frozen_clock) -> dict[str, int]:
    """The rows of the `seeded` fixture (also used by the API tests of the pages' tables)."""
    builders.downstream("org/repo", Level.L2)
    builders.downstream("other/accel", Level.L4)
    builders.downstream("quiet/l1", Level.L1)
    seed_prs(frozen_clock, "org/repo", 6)
    seed_prs(frozen_clock, "other/accel", 3, start_run=5000)
    head = sha("rerun")
    ids = {
        "rerun_first": run(
            frozen_clock,
            "org/repo",
            at=NOW - 3 * HOUR - DAY,
            conclusion="failure",
            failed_tests=[failed_test("test_flaky", "<script>alert('x')</script>")],
            **pr_fields(171_000, head, "test-nn", 9000, 1),
        ),
        "rerun_second": run(
            frozen_clock,
            "org/repo",
            at=NOW - 2 * HOUR - DAY,
            artifact_url="https://example.com/artifacts/9000-2.zip",
            **pr_fields(171_000, head, "test-nn", 9000, 2),
        ),
        "stuck": run(
            frozen_clock,
            "org/repo",
            at=NOW - 5 * HOUR,
            complete=False,
            **pr_fields(171_001, sha("stuck"), "test-nn", 9100),
        ),
        "running": run(
            frozen_clock,
            "org/repo",
            at=NOW - HOUR,
            complete=False,
            **pr_fields(171_002, sha("running"), "test-nn", 9200),
        ),
        "nightly": run(
            frozen_clock,
            "org/repo",
            at=NOW - 10 * HOUR,
            **nightly_fields(sha("nightly"), "build", 9300),
        ),
    }
    return ids
