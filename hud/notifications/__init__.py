"""Notifications: level decisions, demotion warnings, stale or silent backends and repeated L4
gate failures, sent by email and to Slack-compatible webhooks.

An event has a deterministic key ("warning:12:opened"); `emit` records one Notification row per
matching target under the key `<event>:target:<id>` (a unique constraint), in the caller's
transaction, and hands each new row to a task after commit. So an event is recorded once however
often it is raised, and a decision and its notifications commit together. `deliver` claims a
row with a lease before sending (no two workers send it at once) and records the outcome;
failures are retried with backoff by `reconcile`, which the periodic jobs run. Delivery is
at least once: a worker dying between the send and the write may send again after the lease.
"""

import dataclasses
import datetime as dt
import logging
import random
import smtplib
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.validators import URLValidator, validate_email
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F, Max, Q

from hud import levels
from hud.core import clock, taskqueue
from hud.levels import roles
from hud.models import (
    DemotionWarning,
    Downstream,
    Job,
    Level,
    Notification,
    NotificationTarget,
    PromotionRequest,
)
from hud.reads import selectors

logger = logging.getLogger(__name__)

LEVEL_APPROVED = "level_approved"
LEVEL_REJECTED = "level_rejected"
DEMOTION_WARNING = "demotion_warning"
DEMOTION_DECIDED = "demotion_decided"
BACKEND_STALE = "backend_stale"
BACKEND_SILENT = "backend_silent"
GATE_FAILURES = "gate_failures"
EVENT_TYPES: dict[str, str] = {
    LEVEL_APPROVED: "level change approved",
    LEVEL_REJECTED: "level change rejected",
    DEMOTION_WARNING: "demotion warning raised",
    DEMOTION_DECIDED: "demotion warning decided",
    BACKEND_STALE: "backend stale (no results)",
    BACKEND_SILENT: "backend silent (dispatches unanswered)",
    GATE_FAILURES: "repeated L4 gate failures",
}
# What fails the merge gate (hud.checks.mirror): timed out and cancelled jobs do not block.
FAILING_CONCLUSIONS = (Job.Conclusion.FAILURE,)
BACKOFF_BASE_SECONDS = 60
BACKOFF_MAX_SECONDS = 6 * 3600
ERROR_LIMIT = 1000


@dataclasses.dataclass(frozen=True)
class Event:
    """Something people should hear about, with a key that makes it once-only."""

    key: str
    event_type: str
    downstream: Downstream | None
    subject: str
    lines: tuple[str, ...]
    path: str = ""

    def url(self) -> str:
        """The page to open: absolute when CRCR_PUBLIC_URL is set, else the path."""
        base = getattr(settings, "CRCR_PUBLIC_URL", "") or ""
        return f"{base}{self.path}" if self.path else base


@dataclasses.dataclass(frozen=True)
class DeliveryOutcome:
    """What one `deliver` call did; `retry_in` seconds when a retry is due."""

    result: str  # sent, retry, failed, skipped
    retry_in: float | None = None


class DeliveryError(Exception):
    """A send that did not go through; `retryable` says whether trying later may help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


# --- Formatting -------------------------------------------------------------------------------


def slack_escape(text: str) -> str:
    """Escape Slack mrkdwn control characters so user text cannot ping or link (<!channel>)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mask_address(kind: str, address: str) -> str:
    """How a target's address is shown: webhook URLs carry their secret in the path."""
    if kind != NotificationTarget.Kind.WEBHOOK:
        return address
    parts = urlsplit(address)
    return f"{parts.scheme}://{parts.hostname or '?'}/…" if parts.scheme else "(webhook)"


def build_payload(event: Event) -> dict[str, Any]:
    """The stored payload: subject and plain text for email, `text` and `blocks` for Slack."""
    url = event.url()
    body = "\n".join([*event.lines, "", url] if url else event.lines)
    link = f"<{url}|Open on the CRCR HUD>" if url.startswith("http") else slack_escape(url)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": event.subject[:150]}},
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": slack_escape("\n".join(event.lines))[:3000]},
        },
    ]
    if link:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": link}]})
    return {
        "event_type": event.event_type,
        "subject": event.subject,
        "body": body,
        "url": url,
        "slack": {"text": slack_escape(event.subject), "blocks": blocks},
    }


def _who(user: Any) -> str:
    return user.get_username() if user is not None else "someone"


def _at(moment: dt.datetime | None) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC" if moment else "?"


# --- Events -----------------------------------------------------------------------------------


def level_decided_event(request: PromotionRequest) -> Event:
    """A decided level-change request (approved or rejected)."""
    name = request.downstream.full_name
    change = f"L{request.from_level} → L{request.to_level}"
    approved = request.status == PromotionRequest.Status.APPROVED
    lines = [
        f"{'Approved' if approved else 'Rejected'} by {_who(request.decided_by)} "
        f"on {_at(request.decided_at)}.",
    ]
    if request.decision_comment:
        lines.append(f"Comment: {request.decision_comment}")
    if approved:
        lines.append(
            "The level applies here now, pending upstream: the allowlist change and the "
            "pytorch/pytorch PR text are on the request page."
        )
    return Event(
        key=f"request:{request.pk}:{request.status}",
        event_type=LEVEL_APPROVED if approved else LEVEL_REJECTED,
        downstream=request.downstream,
        subject=f"[CRCR] {name}: {change} {'approved' if approved else 'rejected'}",
        lines=tuple(lines),
        path=f"/crcr/admin/requests/{request.pk}",
    )


def warning_opened_event(warning: DemotionWarning) -> Event:
    """A demotion warning the daily evaluation raised."""
    name = warning.downstream.full_name
    failing = ", ".join(str(item) for item in warning.failing or []) or "see the gate page"
    return Event(
        key=f"warning:{warning.pk}:opened",
        event_type=DEMOTION_WARNING,
        downstream=warning.downstream,
        subject=f"[CRCR] {name}: demotion warning at L{warning.level}",
        lines=(
            f"{name} has failed its L{warning.level} criteria since {warning.first_failing_on}.",
            f"Failing: {failing}.",
            f"An admin decides by {warning.deadline} (demote one level or dismiss).",
        ),
        path="/crcr/admin",
    )


def warning_decided_event(warning: DemotionWarning) -> Event:
    """An admin's decision on a demotion warning."""
    name = warning.downstream.full_name
    demoted = warning.status == DemotionWarning.Status.DEMOTED
    outcome = f"demoted to L{max(Level.L1, warning.level - 1)}" if demoted else "warning dismissed"
    lines = [f"{'Demoted' if demoted else 'Dismissed'} by {_who(warning.decided_by)} "]
    lines[0] += f"on {_at(warning.decided_at)}."
    if warning.comment:
        lines.append(f"Comment: {warning.comment}")
    return Event(
        key=f"warning:{warning.pk}:{warning.status}",
        event_type=DEMOTION_DECIDED,
        downstream=warning.downstream,
        subject=f"[CRCR] {name}: {outcome}",
        lines=tuple(lines),
        path=f"/crcr/{name}",
    )


# --- Emission ---------------------------------------------------------------------------------


def wants(target: NotificationTarget, event: Event) -> bool:
    """Whether `target` takes `event` (its backend or all, and the event type listed or none)."""
    if not target.enabled:
        return False
    if target.downstream_id is not None and (
        event.downstream is None or target.downstream_id != event.downstream.pk
    ):
        return False
    return not target.events or event.event_type in target.events


def matching_targets(event: Event) -> list[NotificationTarget]:
    """The enabled targets for `event`'s backend (and for all backends) that take its type."""
    scope = Q(downstream__isnull=True)
    if event.downstream is not None:
        scope |= Q(downstream=event.downstream)
    targets = NotificationTarget.objects.filter(scope, enabled=True).order_by("id")
    return [target for target in targets if wants(target, event)]


def emit(event: Event) -> list[int]:
    """Record `event` once per matching target and send each after commit; return new row ids."""

    targets = matching_targets(event)
    if not targets:
        return []
    payload = build_payload(event)
    now = clock.now()
    created = []
    for target in targets:
        try:
            with transaction.atomic():
                row = Notification.objects.create(
                    event_key=f"{event.key}:target:{target.pk}",
                    event=event.key,
                    event_type=event.event_type,
                    downstream=event.downstream,
                    target=target,
                    kind=target.kind,
                    recipient=mask_address(target.kind, target.address),
                    payload=payload,
                    created_at=now,
                    next_attempt_at=now,
                )
        except IntegrityError:
            continue  # this event already went (or is going) to this target
        created.append(row.pk)
        taskqueue.enqueue("crcr.send_notification", row.pk)
    if created:
        logger.info(
            "notifications recorded",
            extra={"event": event.key, "event_type": event.event_type, "count": len(created)},
        )
    return created


def emit_safely(build: Callable[[], Event]) -> list[int]:
    """`emit(build())` in a savepoint: a notification problem never undoes the caller's change."""
    try:
        with transaction.atomic():
            return emit(build())
    except (DatabaseError, LookupError, TypeError, ValueError, AttributeError):
        logger.exception("notification not recorded")
        return []


def level_decided(request: PromotionRequest) -> list[int]:
    """Notify an approved or rejected level-change request (called by hud.promotion)."""
    return emit_safely(lambda: level_decided_event(request))


def warning_opened(warning: DemotionWarning) -> list[int]:
    """Notify a raised demotion warning (called by hud.promotion)."""
    return emit_safely(lambda: warning_opened_event(warning))


def warning_decided(warning: DemotionWarning) -> list[int]:
    """Notify a demoted or dismissed warning (called by hud.promotion)."""
    return emit_safely(lambda: warning_decided_event(warning))


# --- Backend health: stale, silent, repeated L4 gate failures ---------------------------------


def stale_after() -> dt.timedelta:
    """How long without a result makes a backend stale (CRCR_NOTIFY_STALE_HOURS)."""
    return dt.timedelta(hours=settings.CRCR_NOTIFY_STALE_HOURS)


def stale_event(downstream: Downstream, last_result_at: dt.datetime, now: dt.datetime) -> Event:
    """A backend with no result since `last_result_at` (one event per quiet spell)."""
    hours = (now - last_result_at).total_seconds() / 3600
    return Event(
        key=f"stale:{downstream.pk}:{last_result_at.isoformat()}",
        event_type=BACKEND_STALE,
        downstream=downstream,
        subject=f"[CRCR] {downstream.full_name}: no results for {hours:.0f} h",
        lines=(
            f"The last result from {downstream.full_name} (L{downstream.level}) arrived "
            f"{_at(last_result_at)}, {hours:.0f} hours ago.",
            "Check the backend's runners and its callback step.",
        ),
        path=f"/crcr/{downstream.full_name}",
    )


def silent_streak(downstream: Downstream, now: dt.datetime) -> tuple[int, int] | None:
    """(unanswered dispatches, id of the last answered one or 0) when the latest N are silent."""
    wanted = settings.CRCR_NOTIFY_SILENT_DISPATCHES
    if wanted < 1:
        return None
    settled_before = now - selectors.no_response_after()
    sent = selectors.sent_to_l2_plus(now - dt.timedelta(days=365), settled_before).filter(
        downstream=downstream
    )
    latest = list(sent.order_by("-dispatched_at", "-id").values("id", "answered")[:wanted])
    if len(latest) < wanted or any(row["answered"] for row in latest):
        return None
    # The last answered dispatch names the silent spell, so it is notified once.
    answered = sent.filter(answered=True).order_by("-dispatched_at", "-id").first()
    return wanted, answered.pk if answered else 0


def silent_event(downstream: Downstream, unanswered: int, after_dispatch: int) -> Event:
    """A backend that stopped answering its dispatches."""
    hours = settings.CRCR_NO_RESPONSE_AFTER_SECONDS / 3600
    return Event(
        key=f"silent:{downstream.pk}:after:{after_dispatch}",
        event_type=BACKEND_SILENT,
        downstream=downstream,
        subject=f"[CRCR] {downstream.full_name}: dispatches unanswered",
        lines=(
            f"The last {unanswered} dispatches to {downstream.full_name} (L{downstream.level}) "
            f"got no callback within {hours:g} hours.",
            "Check that the backend's workflow listens for repository_dispatch and calls back.",
        ),
        path=f"/crcr/{downstream.full_name}",
    )


def failing_shas(downstream: Downstream, limit: int = 2000) -> list[tuple[str, bool]]:
    """The backend's recent PR head SHAs, newest first, and whether each failed.

    A SHA fails when the latest attempt of any of its jobs failed (as the merge gate reads it).
    """
    rows = (
        Job.objects.filter(
            downstream=downstream, event_type="pull_request", status=Job.Status.COMPLETED
        )
        .order_by("-placed_at", "-id")
        .values_list("head_sha", "workflow_name", "job_name", "run_attempt", "conclusion")[:limit]
    )
    order: dict[str, None] = {}  # insertion-ordered: newest first
    latest: dict[tuple[str, str, str], tuple[int, str]] = {}
    for head_sha, workflow, job_name, attempt, conclusion in rows:
        order.setdefault(head_sha)
        key = (head_sha, workflow, job_name)
        if key not in latest or attempt > latest[key][0]:
            latest[key] = (attempt, conclusion)
    failed = {
        key[0] for key, (_, conclusion) in latest.items() if conclusion in FAILING_CONCLUSIONS
    }
    return [(sha, sha in failed) for sha in order]


def notify_gate_failure(
    downstream: Downstream, head_sha: str = "", pr_number: int = 0
) -> list[int]:
    """Notify when an L4 backend failed its last CRCR_NOTIFY_GATE_FAILURES PR SHAs in a row.

    The entry point for the merge gate (hud.checks.mirror) to call when a backend fails the gate on
    `head_sha`; the periodic check calls it for every L4 backend too. One event per failing
    streak, named by the streak's first SHA.
    """
    wanted = settings.CRCR_NOTIFY_GATE_FAILURES
    if wanted < 1 or levels.effective_level(downstream) != Level.L4:
        return []
    streak = []
    for sha, failed in failing_shas(downstream):
        if not failed:
            break
        streak.append(sha)
    if len(streak) < wanted:
        return []
    latest = head_sha or streak[0]
    where = f" (latest on PR #{pr_number})" if pr_number else ""
    event = Event(
        key=f"gate:{downstream.pk}:{streak[-1]}",
        event_type=GATE_FAILURES,
        downstream=downstream,
        subject=f"[CRCR] {downstream.full_name}: {len(streak)} failing PR commits in a row at L4",
        lines=(
            f"{downstream.full_name} is L4 (blocking) and failed its jobs on the last "
            f"{len(streak)} PR head commits{where}; latest {latest[:12]}.",
            "Failing L4 results block merges: look for an infrastructure problem, or ask an "
            "admin for a temporary override.",
        ),
        path=f"/crcr/commit/{latest}" if latest else f"/crcr/{downstream.full_name}",
    )
    return emit_safely(lambda: event)


def notify_gate_decision(decision: dict[str, Any]) -> list[int]:
    """Hook for hud.checks: pass a failing `gate_decision` to `notify_gate_failure` per backend."""
    if decision.get("state") != "failure":
        return []
    names = sorted({item["downstream"] for item in decision.get("blocking", [])})
    pr_numbers = decision.get("pr_numbers") or [0]
    created: list[int] = []
    for downstream in Downstream.objects.filter(full_name__in=names):
        created += notify_gate_failure(downstream, decision.get("head_sha", ""), pr_numbers[-1])
    return created


def check_backends(now: dt.datetime | None = None) -> dict[str, int]:
    """The periodic health check of listed L2+ backends: stale, silent, repeated gate failures."""
    now = now or clock.now()
    counts = {"stale": 0, "silent": 0, "gate_failures": 0}
    backends = list(Downstream.objects.filter(delisted=False, level__gte=Level.L2))
    last_results = dict(
        Job.objects.filter(downstream__in=backends)
        .values("downstream_id")
        .annotate(last=Max("placed_at"))
        .values_list("downstream_id", "last")
    )
    for backend in backends:
        if levels.effective_level(backend, now) < Level.L2:
            continue  # held at L1 by an override: its results are ignored, silence is expected
        last = last_results.get(backend.pk)
        if last is not None and now - last > stale_after():
            counts["stale"] += len(emit_safely(lambda b=backend, t=last: stale_event(b, t, now)))
        streak = silent_streak(backend, now)
        if streak is not None:
            counts["silent"] += len(emit_safely(lambda b=backend, s=streak: silent_event(b, *s)))
        counts["gate_failures"] += len(notify_gate_failure(backend))
    return counts


# --- Delivery ---------------------------------------------------------------------------------


def lease() -> dt.timedelta:
    """How long a claimed row is left to its sender before another may try."""
    return dt.timedelta(seconds=max(60.0, 3 * settings.CRCR_NOTIFY_WEBHOOK_TIMEOUT + 30))


def backoff(attempts: int) -> float:
    """Seconds before attempt `attempts + 1`: exponential from a minute, capped, jittered."""
    delay = min(BACKOFF_BASE_SECONDS * 2 ** max(attempts - 1, 0), BACKOFF_MAX_SECONDS)
    return delay * random.uniform(0.8, 1.0)


def send_email(notification: Notification, target: NotificationTarget) -> None:
    """Send the notification by Django's email backend."""
    payload = notification.payload
    message = EmailMessage(
        subject=payload["subject"],
        body=payload["body"],
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[target.address],
        headers={"X-CRCR-Event": notification.event},
    )
    try:
        message.send(fail_silently=False)
    except smtplib.SMTPRecipientsRefused as exc:
        raise DeliveryError(f"recipient refused: {exc}", retryable=False) from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(f"{type(exc).__name__}: {exc}", retryable=True) from exc


def send_webhook(notification: Notification, target: NotificationTarget) -> None:
    """POST the Slack-compatible body; 2xx is sent, 429 and 5xx are retried, other 4xx are not."""
    try:
        response = httpx.post(
            target.address,
            json=notification.payload["slack"],
            timeout=settings.CRCR_NOTIFY_WEBHOOK_TIMEOUT,
            follow_redirects=False,
            headers={"User-Agent": "crcr-hud", "X-CRCR-Event": notification.event},
        )
    except httpx.HTTPError as exc:
        # The exception text may quote the URL, which holds the webhook's secret.
        text = str(exc).replace(target.address, mask_address(target.kind, target.address))
        raise DeliveryError(f"{type(exc).__name__}: {text}", retryable=True) from exc
    if response.is_success:
        return
    detail = f"HTTP {response.status_code}: {response.text[:200]}"
    retryable = response.status_code == 429 or response.status_code >= 500
    raise DeliveryError(detail, retryable=retryable)


SENDERS: dict[str, Callable[[Notification, NotificationTarget], None]] = {
    NotificationTarget.Kind.EMAIL: send_email,
    NotificationTarget.Kind.WEBHOOK: send_webhook,
}


def deliver(notification_id: int) -> DeliveryOutcome:
    """Send one due notification (claimed first, so it is never sent twice at once)."""
    now = clock.now()
    claimed = (
        Notification.objects.filter(
            pk=notification_id,
            status__in=[Notification.Status.PENDING, Notification.Status.FAILED],
            next_attempt_at__lte=now,
        )
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        .update(claimed_until=now + lease(), attempts=F("attempts") + 1)
    )
    if not claimed:
        return DeliveryOutcome("skipped")
    row = Notification.objects.select_related("target").get(pk=notification_id)
    target = row.target
    error: DeliveryError | None = None
    if target is None or not target.enabled:
        error = DeliveryError("the target was removed or disabled", retryable=False)
    else:
        try:
            SENDERS[target.kind](row, target)
        except DeliveryError as exc:
            error = exc
    finished = clock.now()
    row.claimed_until = None
    if error is None:
        row.status, row.sent_at = Notification.Status.SENT, finished
        row.next_attempt_at, row.last_error = None, ""
        outcome = DeliveryOutcome("sent")
    else:
        row.status = Notification.Status.FAILED
        row.last_error = str(error)[:ERROR_LIMIT]
        if error.retryable and row.attempts < settings.CRCR_NOTIFY_MAX_ATTEMPTS:
            wait = backoff(row.attempts)
            row.next_attempt_at = finished + dt.timedelta(seconds=wait)
            outcome = DeliveryOutcome("retry", wait)
        else:
            row.next_attempt_at = None
            outcome = DeliveryOutcome("failed")
        logger.warning(
            "notification not delivered",
            extra={
                "notification": row.pk,
                "event": row.event,
                "kind": row.kind,
                "attempts": row.attempts,
                "outcome": outcome.result,
                "error": row.last_error,
            },
        )
    row.save(update_fields=["status", "sent_at", "next_attempt_at", "last_error", "claimed_until"])
    return outcome


def due(now: dt.datetime | None = None) -> Iterable[int]:
    """Ids of rows to (re)send now: pending or retryable failures whose time has come."""
    now = now or clock.now()
    return (
        Notification.objects.filter(
            status__in=[Notification.Status.PENDING, Notification.Status.FAILED],
            next_attempt_at__lte=now,
        )
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        .order_by("next_attempt_at", "id")
        .values_list("id", flat=True)
    )


def reconcile(limit: int = 200) -> int:
    """Re-enqueue due notifications: lost enqueues, crashed senders and retries after backoff."""

    ids = list(due()[:limit])
    for notification_id in ids:
        taskqueue.enqueue("crcr.send_notification", notification_id)
    return len(ids)


def retry_now(notification: Notification) -> bool:
    """An admin asks to try a failed (even given-up) notification again now."""

    updated = Notification.objects.filter(
        pk=notification.pk, status=Notification.Status.FAILED
    ).update(next_attempt_at=clock.now())
    if updated:
        taskqueue.enqueue("crcr.send_notification", notification.pk)
    return bool(updated)


def periodic() -> dict[str, Any]:
    """The periodic work: the backend health check, then re-sending what is due."""
    return {"events": check_backends(), "resent": reconcile()}


# --- Targets (admins) -------------------------------------------------------------------------


def validate_address(kind: str, address: str) -> str:
    """A cleaned address for `kind`; ValidationError when it cannot be one."""
    address = address.strip()
    if kind == NotificationTarget.Kind.EMAIL:
        validate_email(address)
    elif kind == NotificationTarget.Kind.WEBHOOK:
        URLValidator(schemes=["https", "http"])(address)
    else:
        raise ValidationError({"kind": f"unknown kind {kind!r}"})
    return address


def create_target(
    user: Any,
    *,
    kind: str,
    address: str,
    downstream: Downstream | None = None,
    events: Iterable[str] = (),
    description: str = "",
) -> NotificationTarget:
    """An admin adds an email address or a webhook, for one backend or for all."""
    roles.require_admin(user)
    events = sorted(set(events))
    unknown = [name for name in events if name not in EVENT_TYPES]
    if unknown:
        raise ValidationError({"events": f"unknown event types: {', '.join(unknown)}"})
    try:
        address = validate_address(kind, address)
    except ValidationError as error:
        raise ValidationError({"address": error.messages}) from error
    target = NotificationTarget.objects.create(
        downstream=downstream,
        kind=kind,
        address=address,
        events=events,
        description=description.strip(),
        created_at=clock.now(),
    )
    logger.info(
        "notification target added",
        extra={"target": target.pk, "kind": kind, "by": getattr(user, "pk", None)},
    )
    return target


def set_target_enabled(user: Any, target: NotificationTarget, enabled: bool) -> None:
    """An admin pauses or resumes a target."""
    roles.require_admin(user)
    NotificationTarget.objects.filter(pk=target.pk).update(enabled=enabled)


def delete_target(user: Any, target: NotificationTarget) -> None:
    """An admin removes a target (its notifications stay in the audit list)."""
    roles.require_admin(user)
    target.delete()
