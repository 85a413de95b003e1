"""Delivery: send one recorded notification by email or webhook, retried with backoff.

`deliver` claims a row with a lease before sending (no two workers send it at once) and
records the outcome; failures are retried with backoff by `reconcile`, which the periodic jobs
run. Delivery is at least once: a worker dying between the send and the write may send again
after the lease.
"""

import dataclasses
import datetime as dt
import logging
import random
import smtplib
from collections.abc import Callable, Iterable

import httpx
from django.conf import settings
from django.core.mail import EmailMessage
from django.db.models import F, Q

from hud.core import clock, taskqueue
from hud.models import Notification, NotificationTarget
from hud.notifications.events import mask_address

logger = logging.getLogger(__name__)

BACKOFF_BASE_SECONDS = 60
BACKOFF_MAX_SECONDS = 6 * 3600
ERROR_LIMIT = 1000


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
