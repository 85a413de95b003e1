"""Level-change requests: a maintainer asks, an admin approves or rejects, each audited.

An approval applies the level here at once, marked pending upstream, with the allowlist text
and the ready-to-paste pytorch/pytorch PR description to send.
"""

import logging

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from hud import levels, notifications
from hud.core import clock
from hud.levels.roles import User, maintains, require_admin
from hud.models import Downstream, Level, LevelChange, PromotionRequest
from hud.promotion.evaluation import evaluate_backend

logger = logging.getLogger(__name__)


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
