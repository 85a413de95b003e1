"""Claiming a row with a lease: the one conditional UPDATE hud.relay and hud.checks share.

A send to GitHub first claims its row by stamping a lease column (`Dispatch.dispatched_at`, the
mirrored rows' `claimed_at`) with a conditional UPDATE that only matches while no live lease
holds the row, so one worker at a time talks to GitHub for it. A lease is live for
`hud.github.lease_seconds()`; a task redelivered after its worker died may take back the exact
stamp its dead run left, and any run may take over a claim whose process stopped beating
(`hud.core.leases`). The ORM half lives here, beside the models; the
cache half (who holds which stamp) in `hud.core.leases`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import Q, QuerySet

from hud import github
from hud.core import leases


def unleased(field: str, now: dt.datetime) -> Q:
    """Rows whose lease in `field` is not held at `now`: never claimed, or the lease ran out."""
    expired = now - dt.timedelta(seconds=github.lease_seconds())
    return Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__lt": expired})


def abandoned(rows: QuerySet, field: str, now: dt.datetime, limit: int = 500) -> set[int]:
    """Rows of `rows` still under lease whose holding process is gone (`hud.core.leases`):
    the reconcilers hand them on at once instead of waiting for the lease to run out."""
    expired = now - dt.timedelta(seconds=github.lease_seconds())
    held = rows.filter(**{f"{field}__gte": expired}).values_list("id", field)[:limit]
    return leases.abandoned(rows.model.__name__, dict(held))


def claim(rows: QuerySet, field: str, row_id: int, now: dt.datetime, **update: Any) -> bool:
    """Stamp `field` of row `row_id` of `rows` with `now` (and `update`) if nobody holds it.

    `rows` carries any further condition of the claim (a dispatch must still be pending). True
    when this call took the row; the claim is then recorded for a redelivery of this task.
    """
    kind = rows.model.__name__
    free = unleased(field, now)
    orphaned = leases.takeover_stamp(kind, row_id)
    if orphaned is not None:  # the run holding it died (this task's, or its process is gone)
        free |= Q(**{field: orphaned})
    claimed = bool(rows.filter(id=row_id).filter(free).update(**{field: now}, **update))
    if claimed:
        leases.record(kind, row_id, now, github.lease_seconds())
    return claimed
