"""Realistic callback traffic for the replay test: jobs of several backends, duplicates, reorders.

`scenario(total)` returns the clean serial order of the distinct callbacks and the hostile
stream (the same callbacks, 20% of the stream being duplicates and 10% arriving out of order),
both as (repository, body) pairs. Deterministic for a given seed.
"""

import datetime as dt
import random
from dataclasses import dataclass

from tests.support import builders

BACKENDS = ("org-a/npu", "org-b/tpu", "org-c/xpu", "org-d/mlu")
PR_DELIVERIES = 40  # known deliveries (webhook received, dispatched to every backend)
DUPLICATE_SHARE = 0.20
REORDERED_SHARE = 0.10


@dataclass(frozen=True)
class Callback:
    """One callback as sent: who sends it and the body."""

    repo: str
    body: dict


def pr_delivery(index: int) -> tuple[str, int, str]:
    """(delivery_id, PR number, head SHA) of a known PR delivery."""
    return f"replay-delivery-{index}", 5000 + index, f"{index + 1:040x}"


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _job_bodies(rng: random.Random, number: int, now: dt.datetime) -> list[Callback]:
    """The callbacks of one downstream job attempt, in the order the action sends them."""
    repo = rng.choice(BACKENDS)
    run_id = 10_000_000 + number
    attempt = 2 if rng.random() < 0.08 else 1
    kind = rng.random()
    extra: dict = {}
    if kind < 0.6:  # a PR we dispatched
        delivery_id, pr, sha = pr_delivery(rng.randrange(PR_DELIVERIES))
        payload, event = builders.pr_payload(number=pr, sha=sha), "pull_request"
    elif kind < 0.75:  # a PR delivery this server never saw (callback-only deployment)
        pr = 9000 + number
        delivery_id, event = f"foreign-{number}", "pull_request"
        payload = builders.pr_payload(number=pr, sha=f"{pr:040x}")
    elif kind < 0.9:  # a push to main
        sha = f"{number:040x}"
        delivery_id, event = f"push-{number}", "push"
        payload = {"ref": "refs/heads/main", "after": sha, "repository": {"full_name": "p/p"}}
    else:  # a nightly self-report: completed only, delivery_id is the SHA
        sha = f"{number + 77:040x}"
        delivery_id, event = sha, "nightly"
        payload = {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": sha}
    conclusion = rng.choices(["success", "failure", "cancelled"], [70, 25, 5])[0]
    if conclusion == "failure":
        failures = rng.randrange(0, 25)
        extra["failed_tests"] = [
            {
                "name": f"test_case_{k}",
                "classname": f"test.test_ops.TestOps{k % 3}",
                "message": f"AssertionError: {number}/{k}",
                "stacktrace": "Traceback …\n" * rng.randrange(1, 5),
                "duration": round(rng.random() * 10, 3),
            }
            for k in range(failures)
        ]
        if rng.random() < 0.3:
            extra["triage_verdict"] = {
                "category": rng.choice(["backend", "infra", "flake"]),
                "confidence": "medium",
                "summary": f"verdict for {number}",
            }
    passed = rng.randrange(100, 9000)
    failed = len(extra.get("failed_tests", []))
    extra["test_results"] = {"passed": passed, "failed": failed, "skipped": 3, "total": passed + 3}
    extra["environment"] = {"runner": rng.choice(["gpu-a", "gpu-b"]), "torch": "2.9"}
    common = {
        "event_type": event,
        "delivery_id": delivery_id,
        "payload": payload,
        "run_id": run_id,
        "run_attempt": attempt,
        "job_name": rng.choice(["build", "test-ops", "test-nn", "test-dist"]),
        "check_run_id": f"{run_id}{attempt}{number % 7}",
    }
    started = now - dt.timedelta(hours=2, minutes=number % 50)
    finished = started + dt.timedelta(minutes=30 + number % 40)
    completed = builders.callback_body(
        repo, status="completed", conclusion=conclusion, **common, **extra
    )
    completed["workflow"]["completed_at"] = _iso(finished)
    if event == "nightly":
        return [Callback(repo, completed)]
    in_progress = builders.callback_body(repo, status="in_progress", **common)
    in_progress["workflow"]["started_at"] = _iso(started)
    return [Callback(repo, in_progress), Callback(repo, completed)]


def scenario(total: int, seed: int = 9, now: dt.datetime | None = None):
    """(serial, stream): distinct callbacks in clean order, and `total` callbacks as sent."""
    rng = random.Random(seed)
    now = now or dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.UTC)
    distinct_target = round(total * (1 - DUPLICATE_SHARE))
    jobs: list[list[Callback]] = []
    count, number = 0, 0
    while count < distinct_target:
        number += 1
        bodies = _job_bodies(rng, number, now)
        if count + len(bodies) > distinct_target:
            bodies = bodies[-1:]  # the last job reports its completion only
        jobs.append(bodies)
        count += len(bodies)
    serial = [callback for job in jobs for callback in job]

    # Sent order: jobs overlap in time; some completions overtake their in_progress.
    pairs = [job for job in jobs if len(job) == 2]
    reordered_jobs = set(
        rng.sample(range(len(pairs)), min(len(pairs), round(total * REORDERED_SHARE / 2)))
    )
    timeline: list[tuple[float, int, Callback]] = []
    sequence = 0
    pair_number = -1
    for index, job in enumerate(jobs):
        start = index + rng.random() * 20
        times = [start, start + 5 + rng.random() * 30][: len(job)]
        if len(job) == 2:
            pair_number += 1
            if pair_number in reordered_jobs:
                times.reverse()
        for moment, callback in zip(times, job, strict=True):
            timeline.append((moment, sequence, callback))
            sequence += 1
    timeline.sort(key=lambda item: (item[0], item[1]))
    stream = [callback for _, _, callback in timeline]
    for _ in range(total - len(stream)):  # duplicates, each some way after its original
        position = rng.randrange(len(stream))
        stream.insert(min(len(stream), position + rng.randrange(1, 200)), stream[position])
    return serial, stream
