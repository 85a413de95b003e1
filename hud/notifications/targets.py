"""Notification targets: admins add, pause and remove email addresses and webhooks."""

import logging
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email

from hud.core import clock
from hud.levels import roles
from hud.models import Downstream, NotificationTarget
from hud.notifications.events import EVENT_TYPES

logger = logging.getLogger(__name__)


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
