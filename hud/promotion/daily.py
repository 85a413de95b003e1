"""The daily evaluation and demotion warnings: a stored verdict per backend and UTC day.

Each finished day's evaluation is stored with its published (smoothed) decisions; `k`
consecutive days saying demote open a warning, which an admin decides (demote one level or
dismiss) by its deadline.
"""

import datetime as dt
import logging

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max

from hud import gates, levels, notifications
from hud.core import clock
from hud.levels.roles import User, require_admin
from hud.models import DemotionWarning, Downstream, GateEvaluation, Level, LevelChange
from hud.promotion.evaluation import (
    BackendGate,
    evaluate_backend,
    evaluate_backends,
    gate_policy,
    level_since,
)

logger = logging.getLogger(__name__)


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
    backend never evaluated starts at `through`. Idempotent per (backend, day). The backends
    due on a day are evaluated together (`evaluate_backends`), then stored one by one.

    A backend whose evaluation fails is logged and stops at that day (`failed` counts them):
    the next run back-fills it from its last stored day, and the other backends are still
    evaluated (alone, that day, should the evaluation together have failed). Raised, it ended
    `run_periodic --loop`, and the sweeper with it.
    """
    last = last_finished_day(clock.now())
    through = through or last
    if through > last:
        raise ValueError(f"{through} has not ended yet: the last finished UTC day is {last}")
    policy = gate_policy()
    made = warned = failed = 0
    first_day = {}
    for downstream in Downstream.objects.filter(delisted=False, level__gte=Level.L2):
        latest = downstream.evaluations.aggregate(latest=Max("day"))["latest"]
        first_day[downstream] = through if latest is None else latest + dt.timedelta(days=1)
    day = min(first_day.values(), default=through + dt.timedelta(days=1))
    while day <= through:
        due = [downstream for downstream, first in first_day.items() if first <= day]
        together = _evaluate_together(due, day)
        for downstream in due:
            try:
                with transaction.atomic():  # a failure takes back its own day's writes only
                    outcome = _evaluate_day(downstream, day, policy, together.get(downstream.id))
            except Exception:
                logger.exception(
                    "daily evaluation failed",
                    extra={"downstream": downstream.full_name, "day": day.isoformat()},
                )
                failed += 1
                del first_day[downstream]  # it stops at this day
                continue
            made += outcome is not None
            warned += bool(outcome)
        day += dt.timedelta(days=1)
    return {"evaluated": made, "warnings": warned, "failed": failed}


def _gated_level(downstream: Downstream, day: dt.date) -> int | None:
    """The backend's level at the end of `day` when that day is gated (L2 or above)."""
    level = levels.level_at(downstream, end_of_day(day))
    return None if level is None or level < Level.L2 else level


def _evaluate_together(due: list[Downstream], day: dt.date) -> dict[int, BackendGate]:
    """The evaluations of `day` of the backends gated that day, in one go; none when that fails
    (each is then evaluated alone, so one backend's failure is its own). No transaction: on
    the embedded SQLite one takes the write lock, and ingestion would wait out the whole
    evaluation of every backend."""
    try:
        gated = [downstream for downstream in due if _gated_level(downstream, day) is not None]
        return evaluate_backends(gated, as_of=end_of_day(day)) if gated else {}
    except Exception:
        logger.warning(
            "daily evaluation of the backends together failed; evaluating each alone", exc_info=True
        )
        return {}


def _evaluate_day(
    downstream: Downstream, day: dt.date, policy: gates.Policy, gate: BackendGate | None = None
) -> int | None:
    """Store `day`'s evaluation with its published decisions; the warnings it raised, or None.
    `gate` is its evaluation when made already (with other backends'); else it is made here.

    The published decisions read only this level's evaluations since the level began, by
    calendar day (`gates.published_decisions`): another level's rows never seed them.
    """
    as_of = end_of_day(day)
    level = _gated_level(downstream, day)
    if level is None:
        return None  # not gated that day
    gate = gate or evaluate_backend(downstream, as_of=as_of)
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
