"""Notifications: level decisions, demotion warnings, stale or silent backends and repeated L4
gate failures, sent by email and to Slack-compatible webhooks.

An event has a deterministic key ("warning:12:opened"); `emit` records one Notification row per
matching target under the key `<event>:target:<id>` (a unique constraint), in the caller's
transaction, and hands each new row to a task after commit. So an event is recorded once however
often it is raised, and a decision and its notifications commit together. `deliver` claims a
row with a lease before sending (no two workers send it at once) and records the outcome;
failures are retried with backoff by `reconcile`, which the periodic jobs run. Delivery is
at least once: a worker dying between the send and the write may send again after the lease.

The package, by step: `events` (event types, `Event`, payload, each event's text), `emission`
(recording once per target), `health` (stale, silent, repeated gate failures), `delivery`
(sending, retries) and `targets` (admins' addresses). Callers import from `hud.notifications`.
"""

from typing import Any

from hud.notifications.delivery import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_MAX_SECONDS,
    ERROR_LIMIT,
    SENDERS,
    DeliveryError,
    DeliveryOutcome,
    backoff,
    deliver,
    due,
    lease,
    reconcile,
    retry_now,
    send_email,
    send_webhook,
)
from hud.notifications.emission import (
    emit,
    emit_safely,
    level_decided,
    matching_targets,
    wants,
    warning_decided,
    warning_opened,
)
from hud.notifications.events import (
    BACKEND_SILENT,
    BACKEND_STALE,
    DEMOTION_DECIDED,
    DEMOTION_WARNING,
    EVENT_TYPES,
    GATE_FAILURES,
    LEVEL_APPROVED,
    LEVEL_REJECTED,
    Event,
    build_payload,
    level_decided_event,
    mask_address,
    silent_event,
    slack_escape,
    stale_event,
    warning_decided_event,
    warning_opened_event,
)
from hud.notifications.health import (
    FAILING_CONCLUSIONS,
    check_backends,
    failing_shas,
    notify_gate_decision,
    notify_gate_failure,
    silent_streak,
    stale_after,
)
from hud.notifications.targets import (
    create_target,
    delete_target,
    set_target_enabled,
    validate_address,
)

__all__ = [
    "BACKEND_SILENT",
    "BACKEND_STALE",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "DEMOTION_DECIDED",
    "DEMOTION_WARNING",
    "ERROR_LIMIT",
    "EVENT_TYPES",
    "FAILING_CONCLUSIONS",
    "GATE_FAILURES",
    "LEVEL_APPROVED",
    "LEVEL_REJECTED",
    "SENDERS",
    "DeliveryError",
    "DeliveryOutcome",
    "Event",
    "backoff",
    "build_payload",
    "check_backends",
    "create_target",
    "delete_target",
    "deliver",
    "due",
    "emit",
    "emit_safely",
    "failing_shas",
    "lease",
    "level_decided",
    "level_decided_event",
    "mask_address",
    "matching_targets",
    "notify_gate_decision",
    "notify_gate_failure",
    "periodic",
    "reconcile",
    "retry_now",
    "send_email",
    "send_webhook",
    "set_target_enabled",
    "silent_event",
    "silent_streak",
    "slack_escape",
    "stale_after",
    "stale_event",
    "validate_address",
    "wants",
    "warning_decided",
    "warning_decided_event",
    "warning_opened",
    "warning_opened_event",
]


def periodic() -> dict[str, Any]:
    """The periodic work: the backend health check, then re-sending what is due."""
    return {"events": check_backends(), "resent": reconcile()}
