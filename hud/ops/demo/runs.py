"""Replaying the demo: a timeline of events, and the runs and callbacks scheduled on it.

The clock is moved to each event's moment and the same code paths as live traffic run:
webhook deliveries (`hud.relay`), callbacks through the state machine (`hud.ingestion.ingest`).
A downstream run is scheduled as its jobs' in_progress and completed callbacks, and a re-run of
some failures; every moment and choice comes from the generator it is given, in a fixed order.
"""

import datetime as dt
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from django.db import transaction
from tqdm import tqdm

from hud import relay
from hud.core import clock
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import Dispatch, Downstream, Job
from hud.ops.demo.cast import (
    FAILURES,
    INFRA_MESSAGE,
    PROFILES,
    SELF_TRIAGING,
    UPSTREAM,
    Profile,
    job_result,
    pr_breakage,
    sha_of,
)


class Timeline:
    """Events at moments; replayed in time order with the clock moved to each."""

    def __init__(self) -> None:
        self.events: list[tuple[dt.datetime, int, Callable[[], object]]] = []

    def at(self, moment: dt.datetime, action: Callable[[], object]) -> None:
        self.events.append((moment, len(self.events), action))

    def replay(self, until: dt.datetime, progress: TextIO | None = None) -> int:
        """Run every event up to `until`; a progress bar on `progress` when given."""
        self.events.sort(key=lambda event: (event[0], event[1]))
        due = [event for event in self.events if event[0] <= until]
        bar = tqdm(due, desc="demo history", unit=" events", file=progress, disable=not progress)
        # One transaction: the services' own atomic blocks become savepoints, so the history
        # costs one commit instead of one per callback (the same rows, about 3x faster).
        with transaction.atomic(), clock.frozen_at(due[0][0]) as moving:
            for moment, _, action in bar:
                moving.set(moment)
                action()
        return len(due)


def callback_body(
    delivery: dict,
    profile: Profile,
    job: str,
    run_id: int,
    attempt: int,
    status: str,
    conclusion: str | None,
    failures: list[tuple[str, str, str]],
    event_type: str,
) -> dict:
    """The body a backend's workflow would post for one job attempt."""
    workflow = {
        "schema_version": "1",
        "status": status,
        "conclusion": conclusion,
        "name": "crcr",
        "url": f"https://github.com/{profile.repo}/actions/runs/{run_id}",
        "run_id": str(run_id),
        "run_attempt": str(attempt),
        "job_name": job,
        "check_run_id": str(run_id * 10 + attempt),
        "started_at": None,
        "completed_at": None,
    }
    if status == "completed":
        failed = len(failures)
        passed = 0 if conclusion in {"cancelled", "timed_out"} else 900 + run_id % 400
        workflow["test_results"] = {
            "passed": passed,
            "failed": failed,
            "skipped": 12,
            "total": passed + failed + 12,
        }
        workflow["failed_tests"] = [
            {
                "classname": classname,
                "name": name,
                "message": message,
                "stacktrace": f'Traceback (most recent call last):\n  File "test/{classname}.py",'
                f" line 42, in {name}\n{message}",
                "duration": 1.5,
            }
            for classname, name, message in failures
        ]
        workflow["artifact_url"] = (
            f"https://github.com/{profile.repo}/actions/runs/{run_id}/artifacts"
        )
        if failures and profile.repo in SELF_TRIAGING:
            workflow["triage_verdict"] = _self_triage(failures, run_id)
    return {
        "event_type": event_type,
        "delivery_id": delivery["delivery_id"],
        "payload": delivery["payload"],
        "workflow": workflow,
    }


def _self_triage(failures: list[tuple[str, str, str]], run_id: int) -> dict:
    """The backend's own (advisory) triage of a failure, as a triaging action would send it."""
    if any(message == INFRA_MESSAGE for _, _, message in failures):
        return {
            "schema_version": "1",
            "category": "infra",
            "confidence": "high",
            "summary": "runner lost its connection to GitHub",
        }
    # Deliberately imperfect (it only sees its own run): our verdict is the one that counts.
    category = "upstream" if run_id % 3 else "backend"
    return {
        "schema_version": "1",
        "category": category,
        "confidence": "low" if run_id % 2 else "medium",
        "summary": f"{failures[0][1]} failed; classified by the backend's triage bot",
    }


def report(downstream: Downstream, body: dict) -> None:
    """Send one callback body through the real ingestion service."""
    ingest.store(downstream, parse_callback(body, downstream.full_name), source=Job.Source.CALLBACK)


def delivery_action(
    delivery_id: str, event: str, body: dict, moment: dt.datetime, backends: dict[str, Downstream]
) -> Callable[[], None]:
    """The event that records a webhook delivery and its dispatches (marked sent)."""

    def action() -> None:
        raw = json.dumps(body, sort_keys=True).encode()
        delivery, _ = relay.record_delivery(delivery_id, event, body, raw, moment)
        # Until the relay sends real dispatches, the demo records them as sent: one statement
        # per delivery (the (delivery, downstream) constraint keeps a re-run from doubling them).
        Dispatch.objects.bulk_create(
            [
                Dispatch(
                    delivery=delivery,
                    downstream=downstream,
                    level_at_dispatch=downstream.level,
                    created_at=moment,
                    dispatched_at=moment,
                    outcome=Dispatch.Outcome.SENT,
                    attempts=1,
                )
                for downstream in backends.values()
            ],
            ignore_conflicts=True,
        )

    return action


@dataclass(frozen=True)
class Run:
    """One downstream workflow run: who runs it, for which delivery, under which run id."""

    downstream: Downstream
    profile: Profile
    payload: dict
    event: str
    run_id: int


def schedule_run(
    timeline: Timeline,
    rng: random.Random,
    downstream: Downstream,
    profile: Profile,
    payload: dict,
    event: str,
    dispatched: dt.datetime,
    day: int,
    run_ids,
    now: dt.datetime,
) -> int:
    """Schedule one downstream workflow run (all its jobs, and a re-run of failures)."""
    run = Run(downstream, profile, payload, event, next(run_ids))
    started = dispatched + dt.timedelta(minutes=rng.randint(*profile.queue_minutes))
    made = 0
    for job in profile.jobs:
        conclusion, failures = job_result(rng, profile, job, day)
        flaky = job == profile.flaky_job and rng.random() < 0.12
        if flaky:
            conclusion, failures = "failure", FAILURES[job][:1]
        broken = event == "pull_request" and pr_breakage(
            profile.repo, job, payload["payload"]["number"]
        )
        if broken and conclusion in ("success", "failure"):
            # The PR's own break, beside whatever else failed; a re-run fails it again.
            conclusion, failures = "failure", [broken, *failures]
        job_start = started + dt.timedelta(minutes=rng.randint(0, 5))
        finished = job_start + dt.timedelta(minutes=rng.randint(*profile.run_minutes))
        if finished > now:
            continue
        made += _schedule_attempt(timeline, run, job, 1, job_start, finished, conclusion, failures)
        if conclusion == "failure" and (flaky or rng.random() < 0.4):
            rerun_start = finished + dt.timedelta(minutes=rng.randint(10, 40))
            rerun_end = rerun_start + dt.timedelta(minutes=rng.randint(*profile.run_minutes))
            if rerun_end <= now:
                second = "success" if flaky else conclusion
                again = [] if flaky else failures
                made += _schedule_attempt(
                    timeline, run, job, 2, rerun_start, rerun_end, second, again
                )
    return made


def _schedule_attempt(
    timeline: Timeline,
    run: Run,
    job: str,
    attempt: int,
    start: dt.datetime,
    end: dt.datetime,
    conclusion: str,
    failures: list[tuple[str, str, str]],
) -> int:
    """One job attempt: its in_progress callback at `start`, its completion at `end`."""
    payload, profile, run_id, event = run.payload, run.profile, run.run_id, run.event
    begin = callback_body(payload, profile, job, run_id, attempt, "in_progress", None, [], event)
    done = callback_body(
        payload, profile, job, run_id, attempt, "completed", conclusion, failures, event
    )
    timeline.at(start, lambda: report(run.downstream, begin))
    timeline.at(end, lambda: report(run.downstream, done))
    return 1


def schedule_stuck_jobs(
    timeline: Timeline, backends: dict[str, Downstream], now: dt.datetime, run_ids
) -> None:
    """One job still in progress for 4 h (stuck), one abandoned 9 h ago (the sweeper's)."""
    for hours, repo in ((4, "furiosa/torch-rngd"), (9, "ibm/torch-spyre")):
        profile = next(p for p in PROFILES if p.repo == repo)
        sha = sha_of("stuck", hours)
        payload = {
            "delivery_id": f"demo-stuck-{hours}",
            "payload": {
                "pull_request": {
                    "number": 169_990 + hours,
                    "head": {"sha": sha},
                    "title": "Stuck downstream job (demo)",
                },
                "repository": {"full_name": UPSTREAM},
            },
        }
        body = callback_body(
            payload,
            profile,
            profile.jobs[-1],
            next(run_ids),
            1,
            "in_progress",
            None,
            [],
            "pull_request",
        )
        timeline.at(now - dt.timedelta(hours=hours), lambda d=backends[repo], b=body: report(d, b))
