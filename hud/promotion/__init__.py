"""Levels in practice: gate evaluations, requests and approvals, overrides, exclusions,
daily evaluations and demotion warnings, each state change audited.

Permissions are checked here, not only in views, so no caller can skip them: maintainers of a
backend may request a level change for it; CRCR admins (superusers or the `crcr-admins`
group) decide requests, overrides, exclusions and demotions.

The package, by step: `evaluation` (a backend's gate evaluation), `change_requests` (requests
and approvals), `overrides` (overrides and exclusions), `daily` (the daily evaluation and
demotion warnings); this module re-exports their public names, where callers import them, and
reads what /crcr/admin shows.
"""

import datetime as dt
from typing import Any

from django.db.models import Q

from hud.core import clock
from hud.levels import active_override, effective_level  # one copy, in hud.levels
from hud.levels.roles import ADMIN_GROUP, User, is_admin, maintains, require_admin
from hud.models import (
    DemotionWarning,
    Downstream,
    GateEvaluation,
    GateExclusion,
    LevelChange,
    LevelOverride,
    PromotionRequest,
)
from hud.promotion.change_requests import approve, pr_description, reject, request_change
from hud.promotion.daily import daily_evaluation, decide_warning, end_of_day, last_finished_day
from hud.promotion.evaluation import (
    BackendGate,
    evaluate_backend,
    evaluate_backends,
    gate_policy,
    level_since,
    oncall_response_hours,
)
from hud.promotion.overrides import add_exclusion, create_override, revoke_override
from hud.promotion.snapshot import GateView, current_gate
from hud.promotion.snapshot import refresh as refresh_gate
from hud.promotion.snapshot import refresh_all as refresh_gates

__all__ = [
    "ADMIN_GROUP",
    "BackendGate",
    "GateView",
    "User",
    "active_override",
    "add_exclusion",
    "admin_overview",
    "approve",
    "create_override",
    "current_gate",
    "daily_evaluation",
    "decide_warning",
    "effective_level",
    "end_of_day",
    "evaluate_backend",
    "evaluate_backends",
    "gate_policy",
    "is_admin",
    "last_finished_day",
    "level_since",
    "maintains",
    "oncall_response_hours",
    "pr_description",
    "refresh_gate",
    "refresh_gates",
    "reject",
    "request_change",
    "require_admin",
    "revoke_override",
]


def admin_overview(now: dt.datetime | None = None) -> dict[str, Any]:
    """Everything /crcr/admin shows, in a handful of queries."""
    now = now or clock.now()
    return {
        "pending": PromotionRequest.objects.filter(status=PromotionRequest.Status.PENDING)
        .select_related("downstream", "requested_by")
        .order_by("requested_at"),
        "decided": PromotionRequest.objects.exclude(status=PromotionRequest.Status.PENDING)
        .select_related("downstream", "decided_by")
        .order_by("-decided_at")[:20],
        "warnings": DemotionWarning.objects.filter(status=DemotionWarning.Status.OPEN)
        .select_related("downstream")
        .order_by("deadline"),
        "overrides": LevelOverride.objects.filter(revoked_at__isnull=True, expires_at__gt=now)
        .select_related("downstream", "by")
        .order_by("expires_at"),
        "exclusions": GateExclusion.objects.select_related("downstream", "by").order_by(
            "-created_at"
        )[:50],
        "history": LevelChange.objects.select_related("downstream", "by").order_by(
            "-recorded_at", "-id"
        )[:30],
        "latest_evaluations": GateEvaluation.objects.filter(
            Q(day__gte=(now - dt.timedelta(days=2)).date())
        )
        .select_related("downstream")
        .order_by("downstream__full_name", "-day"),
        "backends": Downstream.objects.filter(delisted=False).order_by("-level", "full_name"),
    }
