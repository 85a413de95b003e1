"""Upstream webhook events → stored deliveries (and, with the relay, dispatches)."""

import datetime as dt
import hashlib
from typing import Any

from django.db import IntegrityError, transaction

from hud.models import Delivery

RELAYED_EVENTS = ("pull_request", "push")


def delivery_fields(event: str, body: dict[str, Any]) -> dict[str, Any]:
    """The columns of a Delivery read from an upstream webhook body."""
    pull_request = body.get("pull_request") or {}
    if event == "pull_request" and isinstance(pull_request, dict):
        head = pull_request.get("head") or {}
        base = pull_request.get("base") or {}
        return {
            "action": str(body.get("action") or "")[:40],
            "pr_number": int(pull_request.get("number") or 0),
            "pr_title": str(pull_request.get("title") or "")[:300],
            "head_sha": str(head.get("sha") or "")[:64],
            "base_sha": str(base.get("sha") or "")[:64],
            "base_ref": str(base.get("ref") or "")[:255],
            "labels": [
                str(label.get("name"))
                for label in pull_request.get("labels") or []
                if isinstance(label, dict) and label.get("name")
            ],
        }
    if event == "push":
        return {
            "action": "deleted" if body.get("deleted") else "",
            "head_sha": str(body.get("after") or "")[:64],
            "base_sha": str(body.get("before") or "")[:64],
            "ref": str(body.get("ref") or "")[:255],
        }
    return {"action": str(body.get("action") or "")[:40]}


def record_delivery(
    delivery_id: str, event: str, body: dict[str, Any], raw_body: bytes, received_at: dt.datetime
) -> tuple[Delivery, bool]:
    """Store a delivery once; (delivery, created). The same GUID or raw body is a duplicate."""
    body_sha256 = hashlib.sha256(raw_body).hexdigest()
    existing = (
        Delivery.objects.filter(delivery_id=delivery_id).first()
        or Delivery.objects.filter(body_sha256=body_sha256).first()
    )
    if existing is not None:
        return existing, False
    repository = body.get("repository") or {}
    try:
        with transaction.atomic():
            delivery = Delivery.objects.create(
                delivery_id=delivery_id,
                event_type=event,
                upstream_repo=str(repository.get("full_name") or "")[:200],
                received_at=received_at,
                body_sha256=body_sha256,
                payload=body,
                **delivery_fields(event, body),
            )
    except IntegrityError:
        # A concurrent redelivery won; it is the same delivery.
        return (
            Delivery.objects.filter(delivery_id=delivery_id).first()
            or Delivery.objects.get(body_sha256=body_sha256)
        ), False
    return delivery, True
