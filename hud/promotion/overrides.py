"""Overrides and exclusions: an admin lowers a level for a while, or takes jobs out of gating."""

import datetime as dt

from django.core.exceptions import ValidationError

from hud.core import clock
from hud.levels.roles import User, require_admin
from hud.models import Downstream, GateExclusion, Job, LevelOverride
from hud.promotion import snapshot


def create_override(
    user: User, downstream: Downstream, level: int, expires_at: dt.datetime, reason: str
) -> LevelOverride:
    """A temporary downgrade, effective now, lapsing at `expires_at`."""
    require_admin(user)
    now = clock.now()
    if level >= downstream.level:
        raise ValidationError({"level": "an override lowers the level"})
    if expires_at <= now:
        raise ValidationError({"expires_at": "the expiry must be in the future"})
    if not reason.strip():
        raise ValidationError({"reason": "say why"})
    return LevelOverride.objects.create(
        downstream=downstream,
        level=level,
        reason=reason,
        created_at=now,
        expires_at=expires_at,
        by=user,
    )


def revoke_override(user: User, override: LevelOverride) -> None:
    """End an override early."""
    require_admin(user)
    LevelOverride.objects.filter(pk=override.pk, revoked_at__isnull=True).update(
        revoked_at=clock.now()
    )
    snapshot.settings_changed(override.downstream_id)  # an update() sends no post_save


def add_exclusion(
    user: User,
    downstream: Downstream,
    reason: str,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    job: Job | None = None,
) -> GateExclusion:
    """Take an incident window or one bogus job out of gating, with the reason shown."""
    require_admin(user)
    if not reason.strip():
        raise ValidationError({"reason": "say why"})
    if job is None and (start is None or end is None or end <= start):
        raise ValidationError({"start": "give a window (start before end) or a job"})
    if job is not None and job.downstream_id != downstream.id:
        raise ValidationError({"job": "that job belongs to another backend"})
    return GateExclusion.objects.create(
        downstream=downstream,
        reason=reason,
        start=start,
        end=end,
        job=job,
        created_at=clock.now(),
        by=user,
    )
