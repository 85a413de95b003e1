"""Builders for domain rows and wire bodies, shaped exactly like the public action's."""

import datetime as dt
import itertools
import uuid
from typing import Any

from hud.core import clock
from hud.ingestion import ingest
from hud.models import Delivery, Dispatch, Downstream, Level

_numbers = itertools.count(1)
UPSTREAM = "pytorch/pytorch"
HEAD_SHA = "a" * 40


def downstream(full_name: str = "org/repo", level: int = Level.L2, **fields: Any) -> Downstream:
    """An allowlisted backend."""
    return Downstream.objects.create(
        full_name=full_name, level=level, created_at=fields.pop("created_at", clock.now()), **fields
    )


def callback_token() -> ingest.CallbackToken:
    """A fresh token id, as api.authentication takes it from a verified OIDC token."""
    return ingest.CallbackToken(str(uuid.uuid4()), clock.now() + dt.timedelta(minutes=5))


def pr_payload(number: int = 1234, sha: str = HEAD_SHA, labels: tuple[str, ...] = ()) -> dict:
    """The `payload` of a pull_request dispatch (trimmed to what matters)."""
    return {
        "action": "synchronize",
        "number": number,
        "pull_request": {
            "number": number,
            "title": f"PR {number}",
            "head": {"sha": sha, "ref": "feature"},
            "base": {"sha": "b" * 40, "ref": "main"},
            "labels": [{"name": name} for name in labels],
        },
        "repository": {"full_name": UPSTREAM},
    }


def upstream_event(event_type: str, head: str, pr: int = 0, prefix: str = "d") -> tuple[dict, str]:
    """(payload, delivery id) of the upstream event a callback answers: a PR, a trunk push or
    a nightly at `head`."""
    if event_type == "pull_request":
        return pr_payload(pr, head), f"{prefix}-pr-{pr}-{head[:8]}"
    repository = {"full_name": UPSTREAM}
    if event_type == "push":
        return {"ref": "refs/heads/main", "after": head, "repository": repository}, (
            f"{prefix}-push-{head[:8]}"
        )
    return {"repository": repository, "head_sha": head}, head


def callback_body(
    repo: str = "org/repo",
    *,
    status: str = "in_progress",
    conclusion: str | None = None,
    delivery_id: str = "delivery-1",
    payload: dict | None = None,
    event_type: str = "pull_request",
    run_id: int = 555,
    run_attempt: int = 1,
    job_name: str = "test-ops",
    workflow_name: str = "crcr",
    check_run_id: str | None = None,
    **workflow_extra: Any,
) -> dict:
    """A callback body as `report_callback.py` builds it (strings where numbers are meant)."""
    now = clock.now().isoformat().replace("+00:00", "Z")
    workflow = {
        "schema_version": "1",
        "status": status,
        "conclusion": conclusion if status == "completed" else None,
        "name": workflow_name,
        "url": f"https://github.com/{repo}/actions/runs/{run_id}",
        "run_attempt": str(run_attempt),
        "job_name": job_name,
        "check_run_id": check_run_id or f"{run_id}-{run_attempt}",
        "run_id": str(run_id),
        "started_at": None if status == "completed" else now,
        "completed_at": None if status == "in_progress" else now,
        **workflow_extra,
    }
    return {
        "event_type": event_type,
        "delivery_id": delivery_id,
        "payload": pr_payload() if payload is None else payload,
        "workflow": workflow,
    }


def delivery(
    delivery_id: str = "delivery-1",
    *,
    number: int = 1234,
    sha: str = HEAD_SHA,
    received_at: dt.datetime | None = None,
) -> Delivery:
    """A stored upstream pull_request delivery."""
    return Delivery.objects.create(
        delivery_id=delivery_id,
        event_type="pull_request",
        upstream_repo=UPSTREAM,
        action="synchronize",
        pr_number=number,
        head_sha=sha,
        base_ref="main",
        received_at=received_at or clock.now(),
        body_sha256=f"{next(_numbers):064x}",
    )


def dispatch(
    delivery_row: Delivery, backend: Downstream, at: dt.datetime | None = None
) -> Dispatch:
    """A dispatch already sent to `backend`."""
    at = at or clock.now()
    return Dispatch.objects.create(
        delivery=delivery_row,
        downstream=backend,
        level_at_dispatch=backend.level,
        created_at=at,
        dispatched_at=at,
        outcome=Dispatch.Outcome.SENT,
        attempts=1,
    )


def forward_body(
    callback: dict,
    repo: str = "org/repo",
    level: str = "L2",
    queue_time: float | None = 60.0,
    execution_time: float | None = 600.0,
) -> dict:
    """A relay → HUD forward body wrapping `callback`."""
    return {
        "trusted": {
            "ci_metrics": {"queue_time": queue_time, "execution_time": execution_time},
            "verified_repo": repo,
            "downstream_repo_level": level,
        },
        "untrusted": {"callback_payload": callback},
    }
