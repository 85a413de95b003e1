"""`POST /github/webhook`: the upstream GitHub App's webhook (CRCR.md, "Dispatch").

Answers in this order, each step stopping at the first failure: body over the cap → 413;
signature missing → 400, wrong → 401; headers or JSON unusable → 400; then the relay service
decides: ignored (event or repository), duplicate (same GUID or raw body), stored, dispatched.
Stored events may still act (hud.checks.mirror, relay part 2): a `ciflow/crcr/*` label back-fills L3
check runs, and `check_run`/`check_suite` `rerequested` re-run the downstream runs.
The answer never waits on GitHub or the broker: the fan-out runs in tasks enqueued on commit.
"""

import logging
from urllib.parse import parse_qs

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from api import authentication
from api.errors import error_response
from hud import relay
from hud.core.payload import PayloadError, check_webhook, decode_json

logger = logging.getLogger(__name__)
MAX_GUID_CHARS = 100  # Delivery.delivery_id max_length
MAX_EVENT_CHARS = 40  # Delivery.event_type max_length
RETRY_AFTER_UNAVAILABLE = "30"


def _read_capped_body(request: HttpRequest, limit: int) -> bytes | None:
    """The raw body, or None when it is over `limit` (checked before reading it whole)."""
    declared = request.META.get("CONTENT_LENGTH")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        return None
    body = request.read(limit + 1)
    return None if len(body) > limit else body


def _json_text(request: HttpRequest, raw: bytes) -> bytes:
    """The JSON document of a webhook body (GitHub can also post it form-encoded)."""
    content_type = request.META.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        return raw
    try:
        fields = parse_qs(raw.decode("utf-8"), strict_parsing=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PayloadError("form-encoded body is malformed", "payload", "invalid_body") from exc
    values = fields.get("payload")
    if not values:
        raise PayloadError("form-encoded body has no payload field", "payload", "missing_field")
    return values[0].encode("utf-8")


@csrf_exempt
@require_POST
def webhook(request: HttpRequest) -> JsonResponse:
    """POST /github/webhook: verify, store once, and fan out pull_request and push events."""
    limit = settings.CRCR_WEBHOOK_MAX_BODY_BYTES
    raw = _read_capped_body(request, limit)
    if raw is None:
        return error_response(413, "body_too_large", f"the body is larger than {limit} bytes")
    secret = (settings.GITHUB_WEBHOOK_SECRET or "").encode("utf-8")
    try:
        authentication.verify_webhook_signature(
            secret, raw, request.META.get("HTTP_X_HUB_SIGNATURE_256")
        )
    except authentication.SignatureMissing as error:
        return error_response(400, "signature_missing", error.detail, "X-Hub-Signature-256")
    except authentication.SignatureMismatch as error:
        logger.warning("webhook signature refused", extra={"reason": error.detail})
        return error_response(401, "signature_mismatch", error.detail, "X-Hub-Signature-256")

    event = request.META.get("HTTP_X_GITHUB_EVENT", "").strip()
    guid = request.META.get("HTTP_X_GITHUB_DELIVERY", "").strip()
    if not event or len(event) > MAX_EVENT_CHARS:
        return error_response(
            400,
            "missing_header",
            "the X-GitHub-Event header is missing or too long",
            "X-GitHub-Event",
        )
    if event not in relay.HANDLED_EVENTS:
        # Verified but not ours (ping, issues, …): answer before parsing or storing anything.
        return _answer(relay.WebhookOutcome(relay.WebhookStatus.IGNORED, f"{event} not relayed"))
    if not guid or len(guid) > MAX_GUID_CHARS:
        return error_response(
            400,
            "missing_header",
            "the X-GitHub-Delivery header is missing or too long",
            "X-GitHub-Delivery",
        )
    try:
        body = decode_json(_json_text(request, raw))
    except PayloadError as error:
        return error_response(400, error.code, error.detail, error.field)
    if not isinstance(body, dict):
        return error_response(400, "invalid_body", "the webhook body must be a JSON object")
    try:
        check_webhook(event, body)
    except PayloadError as error:
        return error_response(400, error.code, error.detail, error.field)
    try:
        outcome = relay.receive_webhook(guid, event, body, raw)
    except DatabaseError:
        # Nothing was stored; GitHub shows the failure and the delivery can be redelivered.
        logger.exception("database unavailable during webhook", extra={"delivery_id": guid})
        return error_response(
            503,
            "unavailable",
            "the delivery store is unavailable; nothing was stored",
            headers={"Retry-After": RETRY_AFTER_UNAVAILABLE},
        )
    return _answer(outcome)


def _answer(outcome: relay.WebhookOutcome) -> JsonResponse:
    body: dict = {"ok": True, "status": outcome.status.value, "detail": outcome.detail}
    if outcome.delivery_id is not None:
        body["delivery"] = outcome.delivery_id
        body["dispatches"] = outcome.dispatches
    return JsonResponse(body)
