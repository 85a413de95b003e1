"""What a notification says: the event types, `Event`, its stored payload, each event's text.

An event has a deterministic key ("warning:12:opened") so it is recorded once however often it
is raised (`hud.notifications.emission`). The payload holds a subject and plain text for email
and `text` and `blocks` for Slack-compatible webhooks; user text is escaped for Slack mrkdwn.
"""

import dataclasses
import datetime as dt
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from hud.models import DemotionWarning, Downstream, Level, NotificationTarget, PromotionRequest

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


# --- Backend health events --------------------------------------------------------------------


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
