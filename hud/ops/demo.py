"""A deterministic, believable demo history built through the real services.

The clock is moved to each event's moment and the same code paths as live traffic run:
the allowlist import (back-dated), webhook deliveries, callbacks through the state machine,
the sweeper. Random choices come from one seeded generator, so every run builds the same
history relative to the day it runs.
"""

import datetime as dt
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.db import transaction
from tqdm import tqdm

from hud import levels, promotion, relay
from hud.core import clock
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import BackendMaintainer, Dispatch, Downstream, Job

UPSTREAM = "pytorch/pytorch"
DAYS = 42
EVALUATED_DAYS = 6
# Demo sign-ins, printed by `make run`: (login, password, role, maintained backend).
DEMO_USERS = (
    ("admin", "crcr-admin-demo", "CRCR admin", None),
    ("tt-maintainer", "crcr-maintainer-demo", "maintainer", "tenstorrent/tt-torch"),
)

ALLOWLIST_BEFORE = """\
# CRCR allowlist (demo). Levels: L1 forwarded only, L2 on the HUD,
# L3 non-blocking check runs with ciflow/crcr/<device>, L4 blocking.
L1:
  - example-labs/torch-hpu-preview
  - rebellions/torch-rbln
L2:
  - tenstorrent/tt-torch
  - furiosa/torch-rngd
  - ibm/torch-spyre: spyre-oncall-a
  - pytorch/crcr-test  # the relay's probe: proves events reach a backend and results return
L3:
  npu:
    ascend/torch-npu: [npu-oncall-a, npu-oncall-b]
L4: []
"""

ALLOWLIST_NOW = """\
# CRCR allowlist (demo). Levels: L1 forwarded only, L2 on the HUD,
# L3 non-blocking check runs with ciflow/crcr/<device>, L4 blocking.
L1:
  - example-labs/torch-hpu-preview
L2:
  - tenstorrent/tt-torch
  - furiosa/torch-rngd
  - rebellions/torch-rbln  # onboarded ten days ago
  - pytorch/crcr-test  # the relay's probe: proves events reach a backend and results return
L3:
  spyre:
    ibm/torch-spyre: [spyre-oncall-a]
L4:
  - ascend/torch-npu: npu-oncall-a, npu-oncall-b
"""


@dataclass(frozen=True)
class Profile:
    """How a demo backend behaves."""

    repo: str
    jobs: tuple[str, ...]
    pass_rate: float
    queue_minutes: tuple[int, int]
    run_minutes: tuple[int, int]
    first_day: int = DAYS
    flaky_job: str = ""
    infra_day: int | None = None


PROFILES = (
    Profile(
        "ascend/torch-npu",
        ("build", "test-ops", "test-nn", "test-distributed"),
        0.96,
        (2, 12),
        (45, 110),
        infra_day=12,
    ),
    Profile("ibm/torch-spyre", ("build", "test-core", "test-inductor"), 0.94, (5, 25), (30, 90)),
    Profile(
        "tenstorrent/tt-torch",
        ("build", "test-models", "test-ops"),
        0.985,
        (3, 15),
        (25, 70),
        flaky_job="test-models",
    ),
    Profile("furiosa/torch-rngd", ("build", "test-ops"), 0.80, (20, 55), (60, 170)),
    Profile(
        "rebellions/torch-rbln", ("build", "test-smoke"), 0.95, (4, 10), (20, 40), first_day=10
    ),
)

# The relay's probe backend (settings.CRCR_PROBE_REPO): one short job on every delivery. It has
# its own generator and run ids, so adding it leaves the other backends' history unchanged.
PROBE = Profile("pytorch/crcr-test", ("relay-probe",), 0.985, (0, 2), (1, 3))
PROBE_SEED = 20261130
# PR authors (pull_request.user.login), picked by the PR number so the generator is untouched.
AUTHORS = ("ezyang", "malfet", "albanD", "jansel", "huydhn", "kwen2501", "nWEIdia")

FAILURES = {
    "test-ops": [
        (
            "test_ops.TestCommonPRIVATEUSE1",
            "test_out_addmm_float32",
            "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 3 / 64",
        ),
        (
            "test_ops.TestMathBitsPRIVATEUSE1",
            "test_conj_view_linalg_svd_complex64",
            "RuntimeError: linalg.svd: not implemented for this device",
        ),
    ],
    "test-nn": [
        (
            "test_nn.TestNNDeviceTypePRIVATEUSE1",
            "test_LayerNorm_general",
            "AssertionError: Scalars are not close!\nExpected 0.0 but got 1.2e-05",
        )
    ],
    "test-distributed": [
        (
            "distributed.test_c10d",
            "test_allreduce_coalesced",
            "RuntimeError: HCCL error: remote process exited or there was a network error",
        )
    ],
    "test-core": [
        (
            "test_torch.TestTorchDeviceType",
            "test_copy_all_dtypes_and_devices",
            "AssertionError: False is not true : device mismatch",
        )
    ],
    "test-inductor": [
        (
            "inductor.test_torchinductor.GPUTests",
            "test_softmax",
            "torch._inductor.exc.InductorError: LoweringException",
        )
    ],
    "test-models": [
        (
            "models.test_resnet.TestResNet",
            "test_resnet50_train_step",
            "AssertionError: loss diverged after 3 steps (nan)",
        )
    ],
    "test-smoke": [
        ("smoke.test_basic.TestSmoke", "test_tensor_roundtrip", "RuntimeError: device not found")
    ],
    "build": [("build", "compile", "error: no matching function for call to 'at::empty'")],
}
INFRA_MESSAGE = "runner lost communication with the server (ConnectionResetError)"
# A broken-trunk spell (days ago, inclusive): from day 20 to day 18 an upstream change breaks
# one test of torch-spyre's test-core on every commit, trunk and PRs alike, until fixed.
TRUNK_BREAK = ("ibm/torch-spyre", "test-core", range(18, 21))
TRUNK_BREAK_TEST = (
    "test_torch.TestTorchDeviceType",
    "test_index_put_accumulate_large_tensor",
    "RuntimeError: index_put_ with accumulate=True: expected 0 mismatches, got 12",
)
# PRs that truly break a test: about 1 in 12, on every backend running test-ops for half of
# them (corroborated) and on the L4 backend alone for the others. Chosen by a hash of the PR
# number, not the demo's generator, so the rest of the history stays the same.
PR_BREAK_EVERY = 12
PR_BREAK_JOB = "test-ops"
# Backends whose workflow sends a self-reported `triage_verdict` with each failure.
SELF_TRIAGING = ("ascend/torch-npu",)


def _sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()  # noqa: S324


class _Timeline:
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


def _callback_body(
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


def _report(downstream: Downstream, body: dict) -> None:
    ingest.store(downstream, parse_callback(body, downstream.full_name), source=Job.Source.CALLBACK)


def build(
    now: dt.datetime, log: Callable[[str], None] = print, progress: TextIO | None = None
) -> dict[str, int]:
    """Build the demo history ending at `now` (a progress bar on `progress`); return counts."""
    rng = random.Random(20261129)
    start = (now - dt.timedelta(days=DAYS)).replace(hour=0, minute=0, second=0, microsecond=0)
    with clock.frozen_at(start - dt.timedelta(days=20)):
        levels.import_allowlist(
            ALLOWLIST_BEFORE, source="demo", since=start - dt.timedelta(days=20)
        )
    with clock.frozen_at(now - dt.timedelta(days=10)):
        levels.import_allowlist(ALLOWLIST_NOW, source="demo", since=now - dt.timedelta(days=10))
    backends = {
        profile.repo: Downstream.objects.get(full_name=profile.repo) for profile in PROFILES
    }
    probe = Downstream.objects.get(full_name=PROBE.repo)
    probe_rng = random.Random(PROBE_SEED)
    probe_run_ids = iter(range(9_000_000_000, 10_000_000_000, 7))
    timeline = _Timeline()
    run_ids = iter(range(7_000_000_000, 8_000_000_000, 7))
    counts = {"deliveries": 0, "jobs": 0}
    pr_number = 170_000
    for day in range(DAYS, -1, -1):
        day_start = (now - dt.timedelta(days=day)).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        deliveries = []
        for index in range(5):
            pr_number += rng.randint(1, 9)
            moment = day_start + dt.timedelta(hours=6 + 3 * index, minutes=rng.randint(0, 50))
            sha = _sha("pr", pr_number, day)
            deliveries.append(
                (
                    "pull_request",
                    moment,
                    {
                        "action": "synchronize" if index % 2 else "opened",
                        "number": pr_number,
                        "pull_request": {
                            "number": pr_number,
                            "title": _pr_title(rng, pr_number),
                            "user": {"login": AUTHORS[pr_number % len(AUTHORS)]},
                            "head": {"sha": sha, "ref": f"gh/dev/{pr_number}"},
                            "base": {"sha": _sha("base", day), "ref": "main"},
                            "labels": [{"name": "ciflow/crcr/spyre"}] if index == 2 else [],
                        },
                        "repository": {"full_name": UPSTREAM},
                    },
                )
            )
        for index in range(2):
            moment = day_start + dt.timedelta(hours=9 + 7 * index)
            deliveries.append(
                (
                    "push",
                    moment,
                    {
                        "ref": "refs/heads/main",
                        "before": _sha("trunk", day, index - 1),
                        "after": _sha("trunk", day, index),
                        "deleted": False,
                        "repository": {"full_name": UPSTREAM},
                    },
                )
            )
        for event, moment, body in deliveries:
            delivery_id = (
                _sha("delivery", event, moment.isoformat())[:8]
                + "-demo-"
                + _sha(moment.isoformat())[:12]
            )
            payload = {"delivery_id": delivery_id, "payload": body}
            dispatched_to = {**backends, PROBE.repo: probe}
            timeline.at(moment, _delivery_action(delivery_id, event, body, moment, dispatched_to))
            counts["deliveries"] += 1
            counts["jobs"] += _schedule_run(
                timeline, probe_rng, probe, PROBE, payload, event, moment, day, probe_run_ids, now
            )
            for profile in PROFILES:
                if day > profile.first_day:
                    continue
                counts["jobs"] += _schedule_run(
                    timeline,
                    rng,
                    backends[profile.repo],
                    profile,
                    payload,
                    event,
                    moment,
                    day,
                    run_ids,
                    now,
                )
        nightly_sha = _sha("trunk", day, 0)
        for profile in PROFILES[:3]:
            moment = day_start + dt.timedelta(hours=2, minutes=rng.randint(0, 40))
            nightly = {
                "delivery_id": nightly_sha,
                "payload": {"repository": {"full_name": UPSTREAM}, "head_sha": nightly_sha},
            }
            for job in profile.jobs[:2]:
                conclusion, failures = _result(rng, profile, job, day)
                body = _callback_body(
                    nightly,
                    profile,
                    job,
                    next(run_ids),
                    1,
                    "completed",
                    conclusion,
                    failures,
                    "nightly",
                )
                timeline.at(moment, lambda d=backends[profile.repo], b=body: _report(d, b))
                counts["jobs"] += 1
    _schedule_stuck_jobs(timeline, backends, now, run_ids)
    for day in range(EVALUATED_DAYS, 0, -1):
        moment = (now - dt.timedelta(days=day - 1)).replace(hour=0, minute=30, second=0)
        timeline.at(moment, promotion.daily_evaluation)
    timeline.at(now - dt.timedelta(minutes=1), ingest.sweep_zombies)
    events = timeline.replay(now, progress)
    log(
        f"demo: {counts['deliveries']} deliveries, about {counts['jobs']} job attempts, "
        f"{events} events replayed"
    )
    return counts


# What the demo admin may do in /django-admin/: the models hud.admin registers, and users and
# groups (the README sends admins there to add password users and manage the admin group).
DEMO_ADMIN_PERMISSIONS = (
    ("hud", "notificationtarget", ("add", "change", "delete", "view")),
    ("hud", "notification", ("view",)),
    ("hud", "backendmaintainer", ("add", "change", "delete", "view")),
    ("auth", "user", ("add", "change", "view")),
    ("auth", "group", ("change", "view")),
)


def ensure_demo_users() -> list[str]:
    """Create the demo sign-ins (idempotent); return one line per user to print."""
    admins, _ = Group.objects.get_or_create(name=promotion.ADMIN_GROUP)
    lines = []
    for login, password, role, backend in DEMO_USERS:
        user = User.objects.filter(username=login).first()
        if user is None:
            user = User.objects.create_user(login, password=password)
        if backend is None:
            user.groups.add(admins)
            user.is_staff = True
            user.save(update_fields=["is_staff"])
            user.user_permissions.add(*_demo_admin_permissions())
        else:
            downstream = Downstream.objects.filter(full_name=backend).first()
            if downstream is not None:
                BackendMaintainer.objects.get_or_create(user=user, downstream=downstream)
        lines.append(f"  {login} / {password}  ({role}{' of ' + backend if backend else ''})")
    return lines


def _demo_admin_permissions() -> list[Permission]:
    return [
        Permission.objects.get(
            content_type__app_label=app, content_type__model=model, codename=f"{action}_{model}"
        )
        for app, model, actions in DEMO_ADMIN_PERMISSIONS
        for action in actions
    ]


def sign_ins() -> list[dict[str, str]]:
    """The demo sign-ins whose users exist, for the sign-in page (empty outside the demo)."""
    if not settings.CRCR_SHOW_DEMO_SIGN_INS:
        return []
    existing = set(
        User.objects.filter(username__in=[login for login, *_ in DEMO_USERS]).values_list(
            "username", flat=True
        )
    )
    return [
        {"login": login, "password": password, "role": role, "backend": backend or ""}
        for login, password, role, backend in DEMO_USERS
        if login in existing
    ]


def _pr_title(rng: random.Random, number: int) -> str:
    verbs = ["Fix", "Add", "Refactor", "Speed up", "Remove", "Support"]
    things = [
        "addmm decomposition",
        "inductor lowering for softmax",
        "c10d coalesced ops",
        "PrivateUse1 autocast",
        "meta kernel for svd",
        "layer_norm backward",
    ]
    return f"[{number % 7}] {rng.choice(verbs)} {rng.choice(things)}"


def _delivery_action(
    delivery_id: str, event: str, body: dict, moment: dt.datetime, backends: dict[str, Downstream]
) -> Callable[[], None]:
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


def _result(
    rng: random.Random, profile: Profile, job: str, day: int
) -> tuple[str, list[tuple[str, str, str]]]:
    if profile.infra_day is not None and day == profile.infra_day:
        return "failure", [("infra", "runner", INFRA_MESSAGE)]
    roll = rng.random()
    if roll < profile.pass_rate:
        conclusion, failures = "success", []
    elif roll < profile.pass_rate + (1 - profile.pass_rate) * 0.1:
        conclusion, failures = rng.choice(["cancelled", "timed_out"]), []
    else:
        options = FAILURES.get(job, FAILURES["build"])
        conclusion, failures = "failure", rng.sample(options, k=rng.randint(1, len(options)))
    repo, broken_job, days = TRUNK_BREAK
    if (profile.repo, job) == (repo, broken_job) and day in days:
        return "failure", [TRUNK_BREAK_TEST, *failures]
    return conclusion, failures


def pr_breakage(repo: str, job: str, pr_number: int) -> tuple[str, str, str] | None:
    """The test a demo PR truly breaks on this backend's job, if it breaks one."""
    digest = int(_sha("breaks", pr_number)[:8], 16)
    if job != PR_BREAK_JOB or digest % PR_BREAK_EVERY:
        return None
    corroborated = digest // PR_BREAK_EVERY % 2 == 0
    if not corroborated and repo != PROFILES[0].repo:
        return None
    return (
        "test_ops.TestCommonPRIVATEUSE1",
        f"test_pr{pr_number}_out_addmm_float32",
        "AssertionError: Tensor-likes are not close! (a change in this PR)",
    )


def _schedule_run(
    timeline: _Timeline,
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
    run_id = next(run_ids)
    started = dispatched + dt.timedelta(minutes=rng.randint(*profile.queue_minutes))
    made = 0
    for job in profile.jobs:
        conclusion, failures = _result(rng, profile, job, day)
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
        made += _schedule_attempt(
            timeline,
            downstream,
            profile,
            payload,
            event,
            job,
            run_id,
            1,
            job_start,
            finished,
            conclusion,
            failures,
        )
        if conclusion == "failure" and (flaky or rng.random() < 0.4):
            rerun_start = finished + dt.timedelta(minutes=rng.randint(10, 40))
            rerun_end = rerun_start + dt.timedelta(minutes=rng.randint(*profile.run_minutes))
            if rerun_end <= now:
                second = "success" if flaky else conclusion
                made += _schedule_attempt(
                    timeline,
                    downstream,
                    profile,
                    payload,
                    event,
                    job,
                    run_id,
                    2,
                    rerun_start,
                    rerun_end,
                    second,
                    [] if flaky else failures,
                )
    return made


def _schedule_attempt(
    timeline: _Timeline,
    downstream: Downstream,
    profile: Profile,
    payload: dict,
    event: str,
    job: str,
    run_id: int,
    attempt: int,
    start: dt.datetime,
    end: dt.datetime,
    conclusion: str,
    failures: list[tuple[str, str, str]],
) -> int:
    begin = _callback_body(payload, profile, job, run_id, attempt, "in_progress", None, [], event)
    done = _callback_body(
        payload, profile, job, run_id, attempt, "completed", conclusion, failures, event
    )
    timeline.at(start, lambda: _report(downstream, begin))
    timeline.at(end, lambda: _report(downstream, done))
    return 1


def _schedule_stuck_jobs(
    timeline: _Timeline, backends: dict[str, Downstream], now: dt.datetime, run_ids
) -> None:
    """One job still in progress for 4 h (stuck), one abandoned 9 h ago (the sweeper's)."""
    for hours, repo in ((4, "furiosa/torch-rngd"), (9, "ibm/torch-spyre")):
        profile = next(p for p in PROFILES if p.repo == repo)
        sha = _sha("stuck", hours)
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
        body = _callback_body(
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
        timeline.at(now - dt.timedelta(hours=hours), lambda d=backends[repo], b=body: _report(d, b))
