"""Emission: an event recorded once per matching target, then sent after commit.

`emit` records one Notification row per matching target under the key `<event>:target:<id>`
(a unique constraint), in the caller's transaction, and hands each new row to the
`crcr.send_notification` task after commit. So an event is recorded once however often it is
raised, and a decision and its notifications commit together. `emit_safely` keeps a
notification problem from undoing the caller's change.
"""

import logging
from collections.abc import Callable

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Q

from hud.core import clock, taskqueue
from hud.models import DemotionWarning, Notification, NotificationTarget, PromotionRequest
from hud.notifications.events import (
    Event,
    build_payload,
    level_decided_event,
    mask_address,
    warning_decided_event,
    warning_opened_event,
)

logger = logging.getLogger(__name__)


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
