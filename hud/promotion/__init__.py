"""Levels in practice: gate evaluations, requests and approvals, overrides, exclusions,
daily evaluations and demotion warnings, each state change audited.

Permissions are checked here, not only in views, so no caller can skip them: maintainers of a
backend may request a level change for it; CRCR admins (superusers or the `crcr-admins`
group) decide requests, overrides, exclusions and demotions.
"""

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

import pandas as pd
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max, Q

from hud import attribution, gates, levels, notifications, stats
from hud.core import clock
from hud.levels import active_override, effective_level  # noqa: F401  (one copy, in hud.levels)
from hud.levels.roles import ADMIN_GROUP, User, is_admin, maintains, require_admin  # noqa: F401
from hud.models import (
    DemotionWarning,
    Downstream,
    GateEvaluation,
    GateExclusion,
    Job,
    Level,
    LevelChange,
    LevelOverride,
    PromotionRequest,
)
from hud.reads import selectors

logger = logging.getLogger(__name__)


def level_since(downstream: Downstream, as_of: dt.datetime) -> dt.datetime | None:
    """When the level in force at `as_of` began, from the level history."""
    current = levels.level_at(downstream, as_of)
    if current is None:
        return None
    started = None
    for change in downstream.changes.filter(at__lte=as_of).order_by("-at", "-id"):
        if change.to_level != current:
            break
        started = change.at
    return started


# --- Gate evaluation ------------------------------------------------------------------


def _policy() -> gates.Policy:
    return gates.load_policy(getattr(settings, "CRCR_GATE_POLICY", None))


def _excluded(frame: pd.DataFrame, downstream: Downstream) -> tuple[pd.DataFrame, list[dict]]:
    """Drop the logical jobs admins excluded from gating; return the exclusions for display.

    An exclusion takes out whole logical jobs, every attempt: the one job it names, or every
    job with an attempt placed in its window. Dropping only the named attempt would make an
    earlier attempt the latest, and its failure would count again.
    """
    exclusions = list(downstream.exclusions.order_by("created_at"))
    if not exclusions or frame.empty:
        return frame, [_describe_exclusion(item, 0) for item in exclusions]
    job_keys = pd.MultiIndex.from_frame(frame[stats.LOGICAL_JOB_KEY])
    keep = pd.Series(True, index=frame.index)
    described = []
    for item in exclusions:
        if item.job_id is not None:
            named = frame["id"] == item.job_id
        else:
            named = (frame["placed_at"] >= item.start) & (frame["placed_at"] < item.end)
        hit = pd.Series(job_keys.isin(job_keys[named.to_numpy()]), index=frame.index)
        described.append(_describe_exclusion(item, int((hit & keep).sum())))
        keep &= ~hit
    return frame[keep], described


def _describe_exclusion(item: GateExclusion, rows: int) -> dict[str, Any]:
    return {
        "id": item.id,
        "job": item.job_id,
        "start": item.start.isoformat() if item.start else None,
        "end": item.end.isoformat() if item.end else None,
        "reason": item.reason,
        "by": item.by.get_username() if item.by else None,
        "excluded_attempts": rows,
    }


def oncall_response_hours(frame: pd.DataFrame) -> list[float]:
    """Hours from each failed PR attempt to the backend's next attempt of that logical job."""
    prs = frame[(frame["event_type"] == "pull_request") & (frame["status"] == "completed")]
    if prs.empty:
        return []
    ordered = prs.sort_values([*stats.LOGICAL_JOB_KEY, *stats.ATTEMPT_ORDER])
    # The next attempt of the same logical job, in attempt order (NaT for the last one).
    following = ordered.groupby(stats.LOGICAL_JOB_KEY, sort=False)["placed_at"].shift(-1)
    answered = (ordered["conclusion"] == "failure") & following.notna()
    seconds = (following[answered] - ordered.loc[answered, "placed_at"]).dt.total_seconds()
    return (seconds.clip(lower=0.0) / 3600.0).tolist()


@dataclass(frozen=True)
class BackendGate:
    """A backend's evaluation with what it was computed from."""

    evaluation: gates.Evaluation
    effective_level: int
    exclusions: list[dict]
    adjusted: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON for the API and for evidence snapshots."""
        return {
            **self.evaluation.to_dict(),
            "effective_level": f"L{self.effective_level}",
            "exclusions": self.exclusions,
            "adjusted_pass_rate": _adjusted_dict(self.adjusted),
        }


def _adjusted_dict(adjusted: dict[str, Any] | None) -> dict[str, Any] | None:
    """The gate-adjusted pass rate as JSON (estimates as dicts)."""
    if adjusted is None:
        return None
    estimates = {
        key: {kind: estimate.to_dict() for kind, estimate in pair.items()}
        for key, pair in adjusted["estimates"].items()
    }
    return {**adjusted, "estimates": estimates}


def evaluate_backend(
    downstream: Downstream, as_of: dt.datetime | None = None, target_level: int | None = None
) -> BackendGate:
    """Evaluate promotion to the next (or `target_level`) and keep/demote at the current level."""
    as_of = as_of or clock.now()
    policy = _policy()
    current = levels.level_at(downstream, as_of) or downstream.level
    current_label = f"L{current}"
    target_label = (
        f"L{target_level}" if target_level is not None else gates.next_level(current_label)
    )
    horizon = max(
        (c.window_days for lvl in policy.levels.values() for c in (*lvl.promotion, *lvl.demotion)),
        default=30,
    )
    frame = selectors.jobs_frame(as_of - dt.timedelta(days=horizon + 1), as_of, [downstream.id])
    frame, exclusions = _excluded(frame, downstream)
    extra = {
        "oncall_response_p50_hours": stats.percentile_estimate(
            oncall_response_hours(frame), 0.5, min_n=1, unit="hours"
        )
    }
    metrics = gates.gate_metrics(
        frame,
        policy,
        current_level=current_label,
        target_level=target_label,
        as_of=as_of,
        level_since=level_since(downstream, as_of),
        extra=extra,
    )
    # Gate-adjusted pass rate (issue 7): shown always; decided on when the policy says so.
    pass_rate_windows = {
        c.window_days
        for c in (
            *policy.promotion_criteria(target_label or ""),
            *policy.demotion_criteria(current_label),
        )
        if c.metric == "job_pass_rate"
    }
    adjusted = attribution.gate_adjusted_pass_rates(frame, pass_rate_windows, as_of)
    adjusted["basis"] = policy.pass_rate_basis
    if policy.pass_rate_basis == "adjusted":
        metrics.update({key: pair["adjusted"] for key, pair in adjusted["estimates"].items()})
    evaluation = gates.evaluate(metrics, policy, target_label, current_label, as_of=as_of)
    return BackendGate(evaluation, effective_level(downstream, as_of), exclusions, adjusted)


# --- Requests and approvals -----------------------------------------------------------


def request_change(
    user: User,
    downstream: Downstream,
    to_level: int,
    *,
    device: str = "",
    oncalls: list[str] | None = None,
    reason: str = "",
) -> PromotionRequest:
    """A maintainer asks for a level change; the evidence is frozen now."""
    if not maintains(user, downstream):
        raise PermissionDenied(f"you do not maintain {downstream.full_name}")
    if to_level not in Level.values or to_level == downstream.level:
        raise ValidationError({"to_level": "choose a level other than the current one"})
    if to_level == Level.L3 and not device.strip():
        raise ValidationError({"device": "an L3 backend needs a device (ciflow/crcr/<device>)"})
    oncalls = [login.strip().lstrip("@") for login in oncalls or [] if login.strip()]
    if to_level >= Level.L3 and not oncalls:
        raise ValidationError({"oncalls": "L3 and L4 backends need at least one on-call"})
    gate = evaluate_backend(downstream, target_level=to_level)
    try:
        with transaction.atomic():
            return PromotionRequest.objects.create(
                downstream=downstream,
                from_level=downstream.level,
                to_level=to_level,
                device=device.strip(),
                oncalls=oncalls,
                reason=reason,
                evidence=gate.to_dict(),
                requested_by=user,
                requested_at=clock.now(),
            )
    except IntegrityError as exc:
        raise ValidationError({"to_level": "this backend already has a pending request"}) from exc


def approve(user: User, request: PromotionRequest, comment: str = "") -> PromotionRequest:
    """Apply the requested level now, marked pending upstream, with the allowlist to send."""
    require_admin(user)
    now = clock.now()
    with transaction.atomic():
        request = PromotionRequest.objects.select_for_update().get(pk=request.pk)
        if request.status != PromotionRequest.Status.PENDING:
            raise ValidationError({"status": f"this request is already {request.status}"})
        downstream = Downstream.objects.select_for_update().get(pk=request.downstream_id)
        if downstream.level != request.from_level:
            raise ValidationError(
                {
                    "status": (
                        f"the backend moved to L{downstream.level} since this request; "
                        "reject it and ask for a new one"
                    )
                }
            )
        LevelChange.objects.create(
            downstream=downstream,
            from_level=downstream.level,
            to_level=request.to_level,
            at=now,
            recorded_at=now,
            source=LevelChange.Source.APPROVAL,
            by=user,
            reason=comment or request.reason,
            evidence=request.evidence,
        )
        downstream.level = request.to_level
        if request.to_level == Level.L3:
            downstream.device = request.device
        if request.oncalls:
            downstream.oncalls = request.oncalls
        downstream.pending_upstream = True
        downstream.save(update_fields=["level", "device", "oncalls", "pending_upstream"])
        request.status = PromotionRequest.Status.APPROVED
        request.decided_by, request.decided_at = user, now
        request.decision_comment = comment
        request.allowlist_text = levels.export_allowlist_text()
        request.pr_description = pr_description(request, downstream)
        request.save()
        notifications.level_decided(request)
    logger.info(
        "level change approved",
        extra={"downstream": downstream.full_name, "to_level": request.to_level, "by": user.pk},
    )
    return request


def reject(user: User, request: PromotionRequest, comment: str) -> PromotionRequest:
    """Refuse a request with a comment the maintainer will read."""
    require_admin(user)
    if not comment.strip():
        raise ValidationError({"comment": "say why the request is rejected"})
    with transaction.atomic():
        request = PromotionRequest.objects.select_for_update().get(pk=request.pk)
        if request.status != PromotionRequest.Status.PENDING:
            raise ValidationError({"status": f"this request is already {request.status}"})
        request.status = PromotionRequest.Status.REJECTED
        request.decided_by, request.decided_at = user, clock.now()
        request.decision_comment = comment
        request.save(update_fields=["status", "decided_by", "decided_at", "decision_comment"])
        notifications.level_decided(request)
    return request


def pr_description(request: PromotionRequest, downstream: Downstream) -> str:
    """A ready-to-paste pytorch/pytorch PR description for the allowlist change."""
    evaluation = request.evidence or {}
    lines = [
        f"[CRCR] Move {downstream.full_name} from L{request.from_level} to L{request.to_level}",
        "",
        f"Approved on the CRCR HUD by {request.decided_by.get_username()} on "
        f"{request.decided_at:%Y-%m-%d}.",
        "",
        f"Gate evaluation for L{request.to_level} as of {evaluation.get('as_of', '?')}: "
        f"**{evaluation.get('decision') or 'n/a'}**",
        "",
        "| criterion | value | 95% interval | threshold | status |",
        "|---|---|---|---|---|",
    ]
    for item in evaluation.get("criteria", []):
        low, high = item.get("low"), item.get("high")
        interval = f"{low:.4g} – {high:.4g}" if low is not None and high is not None else "—"
        value = "—" if item.get("value") is None else f"{item['value']:.4g}"
        lines.append(
            f"| {item['name']} | {value} | {interval} | {item['direction']} "
            f"{item['threshold']:g} | {item['status']} |"
        )
    if request.oncalls:
        lines += ["", "On-calls: " + ", ".join(request.oncalls)]
    if request.reason:
        lines += ["", "Maintainer's reason:", "", request.reason]
    return "\n".join(lines)


# --- Overrides and exclusions ---------------------------------------------------------


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


# --- Daily evaluation and demotion warnings -------------------------------------------


def last_finished_day(now: dt.datetime) -> dt.date:
    """The most recent UTC day that has ended at `now`."""
    return now.astimezone(dt.UTC).date() - dt.timedelta(days=1)


def end_of_day(day: dt.date) -> dt.datetime:
    """The `as_of` of a day's evaluation: midnight UTC after it."""
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)


def daily_evaluation(through: dt.date | None = None) -> dict[str, int]:
    """Evaluate every L2+ backend for each finished UTC day up to `through`; raise warnings.

    `through` defaults to the last finished day and may not be a day that has not ended (its
    `as_of` would be in the future). A backend's missing days since its latest stored
    evaluation are back-filled in order, so each day's streak reads the days before it; a
    backend never evaluated starts at `through`. Idempotent per (backend, day).
    """
    last = last_finished_day(clock.now())
    through = through or last
    if through > last:
        raise ValueError(f"{through} has not ended yet: the last finished UTC day is {last}")
    policy = _policy()
    made = warned = 0
    for downstream in Downstream.objects.filter(delisted=False, level__gte=Level.L2):
        latest = downstream.evaluations.aggregate(latest=Max("day"))["latest"]
        day = through if latest is None else latest + dt.timedelta(days=1)
        while day <= through:
            outcome = _evaluate_day(downstream, day, policy)
            made += outcome is not None
            warned += bool(outcome)
            day += dt.timedelta(days=1)
    return {"evaluated": made, "warnings": warned}


def _evaluate_day(downstream: Downstream, day: dt.date, policy: gates.Policy) -> int | None:
    """Store `day`'s evaluation with its published decisions; the warnings it raised, or None.

    The published decisions read only this level's evaluations since the level began, by
    calendar day (`gates.published_decisions`): another level's rows never seed them.
    """
    as_of = end_of_day(day)
    level = levels.level_at(downstream, as_of)
    if level is None or level < Level.L2:
        return None  # not gated that day
    gate = evaluate_backend(downstream, as_of=as_of)
    since = level_since(downstream, as_of)
    earlier = downstream.evaluations.filter(day__lt=day, current_level=level)
    if since is not None:
        earlier = earlier.filter(day__gte=since.date())
    rows = list(earlier.order_by("day").values_list("day", "promotion", "retention"))
    days = [row[0] for row in rows] + [day]
    promotions = [row[1] for row in rows] + [gate.evaluation.decision or ""]
    retentions = [row[2] for row in rows] + [gate.evaluation.demotion_decision]
    k = policy.k_consecutive
    stable_retention = gates.published_decisions(days, retentions, k, gates.KEEP)[-1]
    try:
        with transaction.atomic():
            GateEvaluation.objects.create(
                downstream=downstream,
                day=day,
                current_level=level,
                promotion=gate.evaluation.decision or "",
                retention=gate.evaluation.demotion_decision,
                stable_promotion=gates.published_decisions(days, promotions, k, gates.INSUFFICIENT)[
                    -1
                ],
                stable_retention=stable_retention,
                detail=gate.to_dict(),
                created_at=clock.now(),
            )
    except IntegrityError:
        return None  # another worker evaluated the same day
    if stable_retention != gates.DEMOTE:
        return 0
    return _raise_warning(downstream, level, days, retentions, gate, policy)


def _raise_warning(
    downstream: Downstream,
    level: int,
    days: list[dt.date],
    retentions: list[str],
    gate: BackendGate,
    policy: gates.Policy,
) -> int:
    """Open a demotion warning once `k` consecutive calendar days at this level say demote."""
    day = days[-1]
    first_failing = gates.streak_start(days, retentions)
    if retentions[-1] != gates.DEMOTE or (day - first_failing).days + 1 < policy.k_consecutive:
        return 0  # today passed, or the smoothed decision outlived the failing days
    decided = (
        DemotionWarning.objects.filter(downstream=downstream, level=level)
        .exclude(status=DemotionWarning.Status.OPEN)
        .order_by("-first_failing_on")
        .first()
    )
    if (
        decided is not None
        and not GateEvaluation.objects.filter(
            downstream=downstream, day__gte=decided.first_failing_on, day__lte=day
        )
        .exclude(retention=gates.DEMOTE)
        .exists()
    ):
        return 0  # an admin already decided this failing streak; a new one needs a new streak
    try:
        with transaction.atomic():
            warning = DemotionWarning.objects.create(
                downstream=downstream,
                level=level,
                first_failing_on=first_failing,
                deadline=gates.demotion_deadline(first_failing, policy.grace_working_days),
                failing=list(gate.evaluation.demoting),
                created_at=clock.now(),
            )
            notifications.warning_opened(warning)
    except IntegrityError:
        return 0  # one open warning per backend
    return 1


def decide_warning(
    user: User, warning: DemotionWarning, demote: bool, comment: str
) -> DemotionWarning:
    """An admin demotes the backend one level, or dismisses the warning, with a comment."""
    require_admin(user)
    if not comment.strip():
        raise ValidationError({"comment": "say why"})
    now = clock.now()
    with transaction.atomic():
        warning = DemotionWarning.objects.select_for_update().get(pk=warning.pk)
        if warning.status != DemotionWarning.Status.OPEN:
            raise ValidationError({"status": f"this warning is already {warning.status}"})
        if demote:
            downstream = Downstream.objects.select_for_update().get(pk=warning.downstream_id)
            to_level = max(Level.L1, downstream.level - 1)
            LevelChange.objects.create(
                downstream=downstream,
                from_level=downstream.level,
                to_level=to_level,
                at=now,
                recorded_at=now,
                source=LevelChange.Source.ADMIN,
                by=user,
                reason=comment,
                evidence={"warning": warning.id, "failing": warning.failing},
            )
            downstream.level = to_level
            downstream.pending_upstream = True
            downstream.save(update_fields=["level", "pending_upstream"])
        warning.status = (
            DemotionWarning.Status.DEMOTED if demote else DemotionWarning.Status.DISMISSED
        )
        warning.decided_by, warning.decided_at, warning.comment = user, now, comment
        warning.save(update_fields=["status", "decided_by", "decided_at", "comment"])
        notifications.warning_decided(warning)
    return warning


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
