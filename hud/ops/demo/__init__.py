"""A deterministic, believable demo history built through the real services.

The clock is moved to each event's moment and the same code paths as live traffic run:
the allowlist import (back-dated), webhook deliveries, callbacks through the state machine,
the sweeper. Random choices come from one seeded generator, so every run builds the same
history relative to the day it runs.

The package: `cast` (the backends, their jobs and failures, the generator's dice), `runs` (the
timeline and the runs and callbacks scheduled on it), `users` (the demo sign-ins); `build`, here,
schedules each day in turn and replays it. Callers import from `hud.ops.demo`.
"""

import datetime as dt
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

from hud import levels, promotion
from hud.core import clock
from hud.ingestion import ingest
from hud.models import Downstream
from hud.ops.demo.cast import (
    ALLOWLIST_BEFORE,
    ALLOWLIST_NOW,
    AUTHORS,
    DAYS,
    EVALUATED_DAYS,
    PROBE,
    PROBE_SEED,
    PROFILES,
    TRUNK_BREAK_TEST,
    UPSTREAM,
    job_result,
    pr_title,
    sha_of,
)
from hud.ops.demo.runs import (
    Timeline,
    callback_body,
    delivery_action,
    report,
    schedule_run,
    schedule_stuck_jobs,
)
from hud.ops.demo.users import DEMO_USERS, ensure_demo_users, sign_ins

__all__ = [
    "AUTHORS",
    "DEMO_USERS",
    "PROBE",
    "PROFILES",
    "TRUNK_BREAK_TEST",
    "build",
    "ensure_demo_users",
    "sign_ins",
]

SEED = 20261129
# A webhook delivery: (event type, moment, body).
_Delivery = tuple[str, dt.datetime, dict]


@dataclass
class _History:
    """What the days of the demo are scheduled onto, and the generators they draw from.

    The backends share one generator and one stream of run ids; the relay's probe has its own,
    so adding it left the other backends' history unchanged.
    """

    now: dt.datetime
    backends: dict[str, Downstream]
    probe: Downstream
    rng: random.Random = field(default_factory=lambda: random.Random(SEED))
    run_ids: Iterator[int] = field(
        default_factory=lambda: iter(range(7_000_000_000, 8_000_000_000, 7))
    )
    probe_rng: random.Random = field(default_factory=lambda: random.Random(PROBE_SEED))
    probe_run_ids: Iterator[int] = field(
        default_factory=lambda: iter(range(9_000_000_000, 10_000_000_000, 7))
    )
    timeline: Timeline = field(default_factory=Timeline)
    counts: dict[str, int] = field(default_factory=lambda: {"deliveries": 0, "jobs": 0})


def build(
    now: dt.datetime, log: Callable[[str], None] = print, progress: TextIO | None = None
) -> dict[str, int]:
    """Build the demo history ending at `now` (a progress bar on `progress`); return counts."""
    _import_allowlists(now)
    backends = {
        profile.repo: Downstream.objects.get(full_name=profile.repo) for profile in PROFILES
    }
    history = _History(now, backends, Downstream.objects.get(full_name=PROBE.repo))
    pr_number = 170_000
    for day in range(DAYS, -1, -1):
        day_start = (now - dt.timedelta(days=day)).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        deliveries, pr_number = _pr_deliveries(history.rng, day, day_start, pr_number)
        deliveries += _push_deliveries(day, day_start)
        for delivery in deliveries:
            _schedule_delivery(history, delivery, day)
        _schedule_nightlies(history, day, day_start)
    schedule_stuck_jobs(history.timeline, backends, now, history.run_ids)
    _schedule_evaluations(history.timeline, now)
    history.timeline.at(now - dt.timedelta(minutes=1), ingest.sweep_zombies)
    events = history.timeline.replay(now, progress)
    counts = history.counts
    log(
        f"demo: {counts['deliveries']} deliveries, about {counts['jobs']} job attempts, "
        f"{events} events replayed"
    )
    return counts


def _import_allowlists(now: dt.datetime) -> None:
    """The allowlist as it was before the demo's days (back-dated), and as it is now."""
    start = (now - dt.timedelta(days=DAYS)).replace(hour=0, minute=0, second=0, microsecond=0)
    with clock.frozen_at(start - dt.timedelta(days=20)):
        levels.import_allowlist(
            ALLOWLIST_BEFORE, source="demo", since=start - dt.timedelta(days=20)
        )
    with clock.frozen_at(now - dt.timedelta(days=10)):
        levels.import_allowlist(ALLOWLIST_NOW, source="demo", since=now - dt.timedelta(days=10))


def _pr_deliveries(
    rng: random.Random, day: int, day_start: dt.datetime, pr_number: int
) -> tuple[list[_Delivery], int]:
    """A day's five pull_request deliveries, and the last PR number given out."""
    deliveries: list[_Delivery] = []
    for index in range(5):
        pr_number += rng.randint(1, 9)
        moment = day_start + dt.timedelta(hours=6 + 3 * index, minutes=rng.randint(0, 50))
        sha = sha_of("pr", pr_number, day)
        deliveries.append(
            (
                "pull_request",
                moment,
                {
                    "action": "synchronize" if index % 2 else "opened",
                    "number": pr_number,
                    "pull_request": {
                        "number": pr_number,
                        "title": pr_title(rng, pr_number),
                        "user": {"login": AUTHORS[pr_number % len(AUTHORS)]},
                        "head": {"sha": sha, "ref": f"gh/dev/{pr_number}"},
                        "base": {"sha": sha_of("base", day), "ref": "main"},
                        "labels": [{"name": "ciflow/crcr/spyre"}] if index == 2 else [],
                    },
                    "repository": {"full_name": UPSTREAM},
                },
            )
        )
    return deliveries, pr_number


def _push_deliveries(day: int, day_start: dt.datetime) -> list[_Delivery]:
    """A day's two pushes to trunk."""
    return [
        (
            "push",
            day_start + dt.timedelta(hours=9 + 7 * index),
            {
                "ref": "refs/heads/main",
                "before": sha_of("trunk", day, index - 1),
                "after": sha_of("trunk", day, index),
                "deleted": False,
                "repository": {"full_name": UPSTREAM},
            },
        )
        for index in range(2)
    ]


def _schedule_delivery(history: _History, delivery: _Delivery, day: int) -> None:
    """A delivery, its dispatches, and the runs it starts on the probe and each listed backend."""
    event, moment, body = delivery
    delivery_id = (
        sha_of("delivery", event, moment.isoformat())[:8]
        + "-demo-"
        + sha_of(moment.isoformat())[:12]
    )
    payload = {"delivery_id": delivery_id, "payload": body}
    dispatched_to = {**history.backends, PROBE.repo: history.probe}
    history.timeline.at(moment, delivery_action(delivery_id, event, body, moment, dispatched_to))
    history.counts["deliveries"] += 1
    history.counts["jobs"] += schedule_run(
        history.timeline,
        history.probe_rng,
        history.probe,
        PROBE,
        payload,
        event,
        moment,
        day,
        history.probe_run_ids,
        history.now,
    )
    for profile in PROFILES:
        if day > profile.first_day:
            continue
        history.counts["jobs"] += schedule_run(
            history.timeline,
            history.rng,
            history.backends[profile.repo],
            profile,
            payload,
            event,
            moment,
            day,
            history.run_ids,
            history.now,
        )


def _schedule_nightlies(history: _History, day: int, day_start: dt.datetime) -> None:
    """The nightly runs of the first three backends: two jobs each, on the day's first trunk SHA."""
    nightly_sha = sha_of("trunk", day, 0)
    for profile in PROFILES[:3]:
        moment = day_start + dt.timedelta(hours=2, minutes=history.rng.randint(0, 40))
        nightly = {
            "delivery_id": nightly_sha,
            "payload": {"repository": {"full_name": UPSTREAM}, "head_sha": nightly_sha},
        }
        for job in profile.jobs[:2]:
            conclusion, failures = job_result(history.rng, profile, job, day)
            body = callback_body(
                nightly,
                profile,
                job,
                next(history.run_ids),
                1,
                "completed",
                conclusion,
                failures,
                "nightly",
            )
            downstream = history.backends[profile.repo]
            history.timeline.at(moment, lambda d=downstream, b=body: report(d, b))
            history.counts["jobs"] += 1


def _schedule_evaluations(timeline: Timeline, now: dt.datetime) -> None:
    """The daily evaluation just after midnight on each of the last EVALUATED_DAYS days."""
    for day in range(EVALUATED_DAYS, 0, -1):
        moment = (now - dt.timedelta(days=day - 1)).replace(hour=0, minute=30, second=0)
        timeline.at(moment, promotion.daily_evaluation)
