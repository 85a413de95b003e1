"""Repository renames: aliases that keep a backend's history when its repository's name changes.

A renamed or transferred repository's OIDC tokens name it differently (`repository` claim).
An alias maps the other name to the existing backend, so callbacks and forwards from either
name land on the same Downstream (see hud.levels.find_downstream). Only CRCR admins record
aliases; the RepositoryAlias row (who, when, why) is the audit record.
"""

from __future__ import annotations

import logging

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.db.models.functions import Lower

from hud.core import allowlist, clock
from hud.levels import roles
from hud.models import Downstream, RepositoryAlias

logger = logging.getLogger(__name__)
# GitHub owner/repo spelling: letters, digits, '-', '_' and '.'.


def aliases() -> QuerySet[RepositoryAlias]:
    """Every alias, newest first, with its backend and author."""
    return RepositoryAlias.objects.select_related("downstream", "created_by")


def _name_taken(name: str, exclude: Downstream | None = None) -> str | None:
    lowered = name.lower()
    downstreams = Downstream.objects.alias(n=Lower("full_name")).filter(n=lowered)
    if exclude is not None:
        downstreams = downstreams.exclude(pk=exclude.pk)
    if downstreams.exists():
        return f"{name} is already the name of a backend"
    if RepositoryAlias.objects.alias(n=Lower("old_name")).filter(n=lowered).exists():
        return f"{name} is already an alias"
    return None


def record_alias(
    *, user: User, downstream: Downstream, name: str, rename: bool, reason: str
) -> RepositoryAlias:
    """Admin-only: make `name` lead to `downstream`, or rename it to `name` keeping the old one.

    With `rename`, the backend takes `name` (the repository's new owner/repo) and its current
    name becomes the alias; without, `name` becomes an alias of the backend as it is.
    """
    roles.require_admin(user)
    name = name.strip()
    reason = reason.strip()
    if not allowlist.is_repository_name(name):
        raise ValidationError({"name": "give the repository as owner/repo"})
    if not reason:
        raise ValidationError({"reason": "say why (the alias is the audit record)"})
    with transaction.atomic():
        downstream = Downstream.objects.select_for_update().get(pk=downstream.pk)
        if name.lower() == downstream.full_name.lower():
            raise ValidationError({"name": f"{name} is already this backend's name"})
        problem = _name_taken(name, exclude=downstream)
        if problem:
            raise ValidationError({"name": problem})
        old_name = name
        if rename:
            old_name = downstream.full_name
            downstream.full_name = name
            downstream.save(update_fields=["full_name"])
        try:
            with transaction.atomic():
                alias = RepositoryAlias.objects.create(
                    old_name=old_name,
                    downstream=downstream,
                    renamed=rename,
                    reason=reason,
                    created_by=user,
                    created_at=clock.now(),
                )
        except IntegrityError as error:
            # A concurrent admin recorded the same name first.
            raise ValidationError({"name": f"{old_name} is already an alias"}) from error
    logger.info(
        "repository alias recorded",
        extra={
            "alias": old_name,
            "downstream": downstream.full_name,
            "downstream_id": downstream.pk,
            "renamed": rename,
            "by": user.get_username(),
            "reason": reason,
        },
    )
    return alias
