"""Promotion workflow tests: requests, approvals, overrides, exclusions, daily evaluations.

Shared helpers live here (plain functions, no fixtures) so every module builds data the same
way: users by role, backends with level history, and jobs stored through
`hud.ingestion.ingest.store`.
"""

import datetime as dt
import itertools

from django.contrib.auth.models import Group, User
from django.contrib.messages import get_messages

from hud import promotion
from hud.core.payload import parse_callback
from hud.ingestion import ingest
from hud.models import BackendMaintainer, Downstream, Level, LevelChange
from tests.support import builders

UTC = dt.UTC
_serial = itertools.count(1)


def user(username: str) -> User:
    """A signed-in-able user with no role (no password: tests use force_login)."""
    return User.objects.create_user(username)


def admin(username: str = "ada") -> User:
    """A CRCR admin through the `crcr-admins` group (not a superuser)."""
    member = user(username)
    group, _ = Group.objects.get_or_create(name=promotion.ADMIN_GROUP)
    member.groups.add(group)
    return member


def maintainer(backend: Downstream, username: str = "mia") -> User:
    """A maintainer of `backend`."""
    member = user(username)
    BackendMaintainer.objects.create(user=member, downstream=backend)
    return member


def backend(
    full_name: str = "org/repo", level: int = Level.L2, since: dt.datetime | None = None
) -> Downstream:
    """A backend with an import in its level history at `since` (so days-at-level is known)."""
    item = builders.downstream(full_name, level=level)
    if since is not None:
        LevelChange.objects.create(
            downstream=item,
            from_level=None,
            to_level=level,
            at=since,
            recorded_at=since,
            source=LevelChange.Source.IMPORT,
            reason="test history",
        )
    return item


def report(
    downstream: Downstream,
    conclusion: str = "success",
    job_name: str = "test-ops",
    *,
    number: int | None = None,
    run_attempt: int = 1,
) -> int:
    """One completed attempt received now through ingest.store: by default a job of its own
    (delivery, PR, SHA and run); with `number` and a later `run_attempt`, a re-run of that PR's
    job."""
    number = next(_serial) if number is None else number
    body = builders.callback_body(
        downstream.full_name,
        status="completed",
        conclusion=conclusion,
        delivery_id=f"delivery-{number}-{run_attempt}",
        payload=builders.pr_payload(number=number, sha=f"{number:040x}"),
        run_id=100_000 + number,
        run_attempt=run_attempt,
        job_name=job_name,
    )
    outcome = ingest.store(
        downstream, parse_callback(body, downstream.full_name), source="callback"
    )
    assert outcome.status == "created"
    return outcome.job_id


def report_at(
    clock,
    downstream: Downstream,
    start: dt.datetime,
    count: int,
    every: dt.timedelta,
    conclusion: str = "success",
) -> list[int]:
    """`count` jobs received at start, start + every, …; the clock is put back afterwards."""
    back = clock()
    ids = []
    for index in range(count):
        clock.set(start + index * every)
        ids.append(report(downstream, conclusion))
    clock.set(back)
    return ids


def criterion(evaluation: dict, name: str, part: str = "criteria") -> dict:
    """One criterion of an evaluation dict by name."""
    return next(item for item in evaluation[part] if item["name"] == name)


def field_errors(response, form: str) -> dict[str, list[str]]:
    """The errors a re-rendered form shows at its fields, by field name."""
    errors = response.context[form].errors
    html = response.content.decode()
    for name in errors:
        if name != "__all__":
            assert f'id="id_{name}_error"' in html, f"{name}: error not shown at the field"
    return {name: list(problems) for name, problems in errors.items()}


def messages_of(response) -> list[str]:
    """The flash messages a response's request queued."""
    return [str(message) for message in get_messages(response.wsgi_request)]


def break_evaluation_of(monkeypatch, module, broken: Downstream):
    """`module.evaluate_backend` raises for `broken` and evaluates every other backend as
    before, and `module.evaluate_backends` raises for any set that holds it (as a bad row
    fails the evaluation it is read in); returns the live single evaluation (to mend it with)."""
    live = module.evaluate_backend
    live_many = getattr(module, "evaluate_backends", None)

    def fails_for_one(downstream, as_of=None, target_level=None):
        if downstream.id == broken.id:
            raise RuntimeError("bad row")
        return live(downstream, as_of, target_level)

    def fails_with_it(downstreams, as_of=None):
        downstreams = list(downstreams)
        if broken.id in {downstream.id for downstream in downstreams}:
            raise RuntimeError("bad row")
        return live_many(downstreams, as_of)

    monkeypatch.setattr(module, "evaluate_backend", fails_for_one)
    if live_many is not None:
        monkeypatch.setattr(module, "evaluate_backends", fails_with_it)
    return live
