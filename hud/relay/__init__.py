"""Upstream webhook events → stored deliveries → one repository_dispatch per downstream.

The webhook view verifies the signature and calls `receive_webhook`, which stores the delivery
and its Dispatch rows (outcome `pending`) in one transaction and enqueues one `send_dispatch`
task per row on commit, so the answer to GitHub never waits on GitHub or the broker.

Each dispatch is sent at most once at a time and never again once sent: a task first claims
the row with a conditional UPDATE (`outcome = pending` and no live lease), and only the claimer
talks to GitHub. While a dispatch is pending, `dispatched_at` holds the time of its last
attempt (the lease); once sent it holds the time GitHub accepted it, which is what callbacks
measure queue time from. Retryable failures stay `pending` with the reason; `reconcile`
re-enqueues what a lost enqueue, a crashed worker or the in-process pool left behind.

`dispatch_states` and `liveness` are the reads: which results each delivery should produce,
and which backends answered them (a silent L2+ backend becomes `no_response`).

This module holds the webhook → delivery → dispatch path and the sending (claim, send,
reconcile); `body` builds a dispatch's `client_payload` and `states` the reads. Both are
re-exported here.
"""

import dataclasses
import datetime as dt
import enum
import fnmatch
import hashlib
import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q

from hud import github
from hud.checks import mirror
from hud.core import clock, leases, taskqueue
from hud.levels import effective_levels
from hud.models import Delivery, Dispatch, Downstream, Level, claims
from hud.reads import selectors

# Re-exported, so `hud.relay.X` keeps naming them: the dispatch body and the expected results.
from hud.relay.body import (
    CLIENT_PAYLOAD_BUDGET_BYTES,
    COMPACTABLE_OBJECTS,
    IDENTIFYING_KEYS,
    MIN_CAPPED_STRING_BYTES,
    TRIM_MARKER,
    TRIMMABLE_TEXT,
    client_payload,
)
from hud.relay.states import (
    DispatchState,
    Liveness,
    ResponseState,
    delivery_with_states,
    dispatch_states,
    liveness,
    response_state,
)

__all__ = [
    "CLIENT_PAYLOAD_BUDGET_BYTES",
    "COMPACTABLE_OBJECTS",
    "CRCR_LABEL_PREFIX",
    "DISPATCHED_PR_ACTIONS",
    "HANDLED_EVENTS",
    "IDENTIFYING_KEYS",
    "MIN_CAPPED_STRING_BYTES",
    "REASON_MAX_CHARS",
    "RELAYED_EVENTS",
    "TRIMMABLE_TEXT",
    "TRIM_MARKER",
    "DispatchState",
    "Liveness",
    "ResponseState",
    "SendOutcome",
    "SendResult",
    "WebhookOutcome",
    "WebhookStatus",
    "client_payload",
    "delivery_fields",
    "delivery_with_states",
    "dispatch_decision",
    "dispatch_states",
    "lease_seconds",
    "liveness",
    "no_response_after",
    "push_ref_matches",
    "receive_webhook",
    "reconcile",
    "record_delivery",
    "response_state",
    "retry_delay",
    "send_dispatch",
]

logger = logging.getLogger(__name__)

RELAYED_EVENTS = ("pull_request", "push")
HANDLED_EVENTS = ("pull_request", "push", "check_run", "check_suite")
DISPATCHED_PR_ACTIONS = frozenset({"opened", "synchronize", "reopened", "closed"})
CRCR_LABEL_PREFIX = "ciflow/crcr/"
REASON_MAX_CHARS = 500
# The send lease and retry delay are hud.github's (one copy, shared with hud.checks).
lease_seconds = github.lease_seconds
retry_delay = github.retry_delay
no_response_after = selectors.no_response_after


class WebhookStatus(enum.StrEnum):
    """What a webhook delivery led to (the `status` of the answer)."""

    DISPATCHED = "dispatched"  # stored, dispatch rows created and their sends enqueued
    STORED = "stored"  # stored, nothing to dispatch (action, ref, deletion, no downstream)
    DUPLICATE = "duplicate"  # same GUID or same raw body as a stored delivery: no side effect
    IGNORED = "ignored"  # not an event the relay handles, or another repository: not stored


@dataclasses.dataclass(frozen=True)
class WebhookOutcome:
    """The answer to one webhook delivery."""

    status: WebhookStatus
    detail: str
    delivery_id: str | None = None
    dispatches: int = 0


class SendResult(enum.StrEnum):
    """What one `send_dispatch` call did."""

    SENT = "sent"
    NOT_INSTALLED = "not_installed"
    FAILED = "failed"  # permanently: validation, configuration, or attempts exhausted
    RETRY = "retry"  # a retryable failure; the row stays pending
    SKIPPED = "skipped"  # not ours to send: already sent, given up, or claimed by another


@dataclasses.dataclass(frozen=True)
class SendOutcome:
    """The result of a send attempt, and when a retry may be tried (seconds), if any."""

    result: SendResult
    retry_in: float | None = None


# --- webhook → delivery ---------------------------------------------------------------------


def delivery_fields(event: str, body: dict[str, Any]) -> dict[str, Any]:
    """The columns of a Delivery read from an upstream webhook body."""
    pull_request = body.get("pull_request") or {}
    if event == "pull_request" and isinstance(pull_request, dict):
        head = pull_request.get("head") or {}
        base = pull_request.get("base") or {}
        labels = [
            str(label.get("name"))
            for label in pull_request.get("labels") or []
            if isinstance(label, dict) and label.get("name")
        ]
        # `labeled`: the label just added (GitHub also lists it under pull_request.labels,
        # but a delivery built by hand may not); part 2 back-fills L3 check runs from it.
        user = pull_request.get("user") or {}
        added = body.get("label")
        if isinstance(added, dict) and added.get("name") and str(added["name"]) not in labels:
            labels.append(str(added["name"]))
        return {
            "action": str(body.get("action") or "")[:40],
            "pr_number": _int(pull_request.get("number")),
            "pr_title": str(pull_request.get("title") or "")[:300],
            "pr_author": str(user.get("login") or "")[:100] if isinstance(user, dict) else "",
            "head_sha": str(head.get("sha") or "")[:64] if isinstance(head, dict) else "",
            "base_sha": str(base.get("sha") or "")[:64] if isinstance(base, dict) else "",
            "base_ref": str(base.get("ref") or "")[:255] if isinstance(base, dict) else "",
            "labels": labels,
        }
    if event == "push":
        return {
            "action": "deleted" if body.get("deleted") else "",
            "head_sha": str(body.get("after") or "")[:64],
            "base_sha": str(body.get("before") or "")[:64],
            "ref": str(body.get("ref") or "")[:255],
        }
    if event in ("check_run", "check_suite"):
        inner = body.get(event) if isinstance(body.get(event), dict) else {}
        return {
            "action": str(body.get("action") or "")[:40],
            "head_sha": str(inner.get("head_sha") or "")[:64],
        }
    return {"action": str(body.get("action") or "")[:40]}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def record_delivery(
    delivery_id: str, event: str, body: dict[str, Any], raw_body: bytes, received_at: dt.datetime
) -> tuple[Delivery, bool]:
    """Store a delivery once; (delivery, created). The same GUID or raw body is a duplicate."""
    body_sha256 = hashlib.sha256(raw_body).hexdigest()
    existing = (
        Delivery.objects.filter(delivery_id=delivery_id).first()
        or Delivery.objects.filter(body_sha256=body_sha256).first()
    )
    if existing is not None:
        return existing, False
    repository = body.get("repository") or {}
    try:
        with transaction.atomic():
            delivery = Delivery.objects.create(
                delivery_id=delivery_id,
                event_type=event,
                upstream_repo=str(repository.get("full_name") or "")[:200],
                received_at=received_at,
                body_sha256=body_sha256,
                # Stored as sent: hud.core.payload.decode_json refused what jsonb cannot hold.
                payload=body,
                **delivery_fields(event, body),
            )
    except IntegrityError:
        # A concurrent redelivery won; it is the same delivery.
        return (
            Delivery.objects.filter(delivery_id=delivery_id).first()
            or Delivery.objects.get(body_sha256=body_sha256)
        ), False
    return delivery, True


def push_ref_matches(ref: str, patterns: Iterable[str] | None = None) -> bool:
    """Whether a pushed ref is one CRCR_PUSH_REFS dispatches; `*` also spans `/`.

    `refs/tags/ciflow/*` must match PyTorch's `refs/tags/ciflow/<label>/<pr number>` tags.
    """
    if patterns is None:
        patterns = settings.CRCR_PUSH_REFS
    return any(fnmatch.fnmatchcase(ref, pattern) for pattern in patterns)


def dispatch_decision(event: str, body: dict[str, Any]) -> tuple[bool, str]:
    """(dispatch?, why) for a stored upstream delivery (CRCR.md, "Dispatch", "Pushes")."""
    if event == "pull_request":
        action = str(body.get("action") or "")
        if action in DISPATCHED_PR_ACTIONS:
            return True, f"pull_request {action}"
        label = body.get("label") if isinstance(body.get("label"), dict) else {}
        name = str(label.get("name") or "")
        if action == "labeled" and name.startswith(CRCR_LABEL_PREFIX):
            return False, f"label {name} recorded on the delivery for L3 check runs"
        return False, f"pull_request action {action or '(none)'} is not dispatched"
    if event == "push":
        ref = str(body.get("ref") or "")
        if body.get("deleted"):
            return False, f"push deletes {ref}; deletions are not dispatched"
        if not push_ref_matches(ref):
            return False, f"push to {ref} does not match CRCR_PUSH_REFS"
        return True, f"push to {ref}"
    return False, f"{event} events are stored, not dispatched"


def receive_webhook(
    delivery_id: str, event: str, body: dict[str, Any], raw_body: bytes
) -> WebhookOutcome:
    """Store a verified upstream delivery and fan it out; the caller checked the signature."""
    if event not in HANDLED_EVENTS:
        return WebhookOutcome(WebhookStatus.IGNORED, f"{event or 'unnamed'} events are not relayed")
    repository = body.get("repository")
    repo = repository.get("full_name") if isinstance(repository, dict) else None
    upstream = settings.CRCR_UPSTREAM_REPO
    if not isinstance(repo, str) or repo.lower() != upstream.lower():
        return WebhookOutcome(
            WebhookStatus.IGNORED, f"events from {repo or 'no repository'} are not relayed"
        )
    now = clock.now()
    with transaction.atomic():
        delivery, created = record_delivery(delivery_id, event, body, raw_body, now)
        if not created:
            return WebhookOutcome(
                WebhookStatus.DUPLICATE,
                f"already received as delivery {delivery.delivery_id}",
                delivery.delivery_id,
            )
        wanted, why = dispatch_decision(event, body)
        if not wanted:
            # Part 2: a ciflow/crcr/* label back-fills check runs; rerequested checks re-run.
            why = mirror.on_stored_event(delivery, event, body) or why
            return WebhookOutcome(WebhookStatus.STORED, why, delivery_id)
        dispatches = _create_dispatches(delivery, now)
        for dispatch in dispatches:
            taskqueue.enqueue("crcr.send_dispatch", dispatch.id)
        if dispatches and delivery.head_sha and github.mirror_enabled():
            # Part 2: every dispatched SHA gets its crcr/gate check (success when no L4).
            taskqueue.enqueue("crcr.sync_gate", delivery.head_sha)
    logger.info(
        "webhook fanned out",
        extra={"delivery_id": delivery_id, "event": event, "dispatches": len(dispatches)},
    )
    if not dispatches:
        return WebhookOutcome(WebhookStatus.STORED, f"{why}: no listed downstream", delivery_id)
    return WebhookOutcome(
        WebhookStatus.DISPATCHED,
        f"{why}: {len(dispatches)} dispatch(es)",
        delivery_id,
        len(dispatches),
    )


def _create_dispatches(delivery: Delivery, now: dt.datetime) -> list[Dispatch]:
    """One pending Dispatch per listed (not delisted) downstream, L1 to L4."""
    downstreams = list(Downstream.objects.filter(delisted=False).order_by("id"))
    levels = effective_levels(downstreams, now)
    rows = [
        Dispatch(
            delivery=delivery,
            downstream=downstream,
            level_at_dispatch=levels[downstream.id],
            created_at=now,
        )
        for downstream in downstreams
        if Level.L1 <= levels[downstream.id] <= Level.L4
    ]
    Dispatch.objects.bulk_create(rows)
    # bulk_create sets ids on PostgreSQL and SQLite ≥ 3.35; read them back to be sure.
    return list(Dispatch.objects.filter(delivery=delivery).order_by("id"))


# --- sending --------------------------------------------------------------------------------


def _claim(dispatch_id: int, now: dt.datetime) -> bool:
    """Take the row for one send attempt; False if sent, given up, or another holds it."""
    pending = Dispatch.objects.filter(outcome=Dispatch.Outcome.PENDING)
    return claims.claim(pending, "dispatched_at", dispatch_id, now, attempts=F("attempts") + 1)


def _finish(dispatch_id: int, claimed_at: dt.datetime, **fields: Any) -> None:
    """Write an attempt's result, only if our claim still holds (nobody took it since)."""
    Dispatch.objects.filter(
        id=dispatch_id, outcome=Dispatch.Outcome.PENDING, dispatched_at=claimed_at
    ).update(**fields)
    leases.forget("Dispatch", dispatch_id)


def send_dispatch(dispatch_id: int) -> SendOutcome:
    """Send one pending dispatch to GitHub once; record sent / not_installed / failed / retry."""
    now = clock.now()
    if not _claim(dispatch_id, now):
        return SendOutcome(SendResult.SKIPPED)
    dispatch = Dispatch.objects.select_related("delivery", "downstream").get(id=dispatch_id)
    repo = dispatch.downstream.full_name
    delivery = dispatch.delivery
    if not isinstance(delivery.payload, dict):
        _finish(dispatch_id, now, outcome=Dispatch.Outcome.FAILED, reason="payload was pruned")
        return SendOutcome(SendResult.FAILED)
    body, trimmed = client_payload(delivery)
    if trimmed:
        Dispatch.objects.filter(id=dispatch_id).update(trimmed_fields=trimmed)
    try:
        with github.dispatch_client() as client:
            client.dispatch(repo, delivery.event_type, body)
    except github.NotInstalled as error:
        _finish(dispatch_id, now, outcome=Dispatch.Outcome.NOT_INSTALLED, reason=_reason(error))
        logger.warning("dispatch: app not installed", extra=_log(dispatch, error))
        return SendOutcome(SendResult.NOT_INSTALLED)
    except github.GitHubError as error:
        return _failed_attempt(dispatch, now, error, error.retryable, error.retry_after)
    except (github.GitHubConfigError, ValueError) as error:
        return _failed_attempt(dispatch, now, error, False, None)
    _finish(dispatch_id, now, outcome=Dispatch.Outcome.SENT, dispatched_at=clock.now(), reason="")
    logger.info("dispatch sent", extra=_log(dispatch))
    return SendOutcome(SendResult.SENT)


def _failed_attempt(
    dispatch: Dispatch,
    claimed_at: dt.datetime,
    error: Exception,
    retryable: bool,
    retry_after: float | None,
) -> SendOutcome:
    attempts = dispatch.attempts
    if retryable and attempts < settings.CRCR_DISPATCH_MAX_ATTEMPTS:
        # Keep the lease: nobody retries before it runs out; the reason says what happened.
        reason = f"attempt {attempts} failed, will retry: {_reason(error)}"
        _finish(dispatch.id, claimed_at, reason=reason[:REASON_MAX_CHARS])
        logger.warning("dispatch attempt failed", extra=_log(dispatch, error))
        return SendOutcome(SendResult.RETRY, github.retry_delay(attempts, retry_after))
    reason = _reason(error)
    if retryable:
        reason = f"gave up after {attempts} attempts: {reason}"[:REASON_MAX_CHARS]
    _finish(dispatch.id, claimed_at, outcome=Dispatch.Outcome.FAILED, reason=reason)
    logger.error("dispatch failed", extra=_log(dispatch, error))
    return SendOutcome(SendResult.FAILED)


def _reason(error: Exception) -> str:
    return str(error)[:REASON_MAX_CHARS]


def _log(dispatch: Dispatch, error: Exception | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "dispatch": dispatch.id,
        "delivery_id": dispatch.delivery.delivery_id,
        "downstream": dispatch.downstream.full_name,
        "attempts": dispatch.attempts,
    }
    if error is not None:
        extra["error"] = _reason(error)
    return extra


def reconcile(limit: int = 500) -> int:
    """Re-enqueue pending dispatches older than CRCR_DISPATCH_RECONCILE_AFTER with no live lease.

    This is how lost enqueues, crashed workers and failed in-process runs converge; the claim
    in `send_dispatch` keeps a dispatch from being sent twice whatever gets enqueued.
    """

    now = clock.now()
    settled = now - dt.timedelta(seconds=settings.CRCR_DISPATCH_RECONCILE_AFTER_SECONDS)
    pending = Dispatch.objects.filter(outcome=Dispatch.Outcome.PENDING)
    # A send whose process is gone is not waited for: nobody else will finish it.
    gone = claims.abandoned(pending, "dispatched_at", now, limit)
    ids = list(
        pending.filter(
            (Q(created_at__lt=settled) & claims.unleased("dispatched_at", now)) | Q(id__in=gone)
        )
        .order_by("created_at", "id")
        .values_list("id", flat=True)[:limit]
    )
    for dispatch_id in ids:
        taskqueue.enqueue("crcr.send_dispatch", dispatch_id)
    return len(ids)
