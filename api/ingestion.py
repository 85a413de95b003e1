"""Ingestion endpoints: downstream callbacks (OIDC) and the relay → HUD forward (bot key).

Plain Django views rather than DRF ones: the answer order of CRCR.md starts with the raw
body size and the token, before anything parses the body.
"""

import logging
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from api import authentication
from api.errors import error_response
from hud.core.payload import PayloadError, decode_json
from hud.ingestion import ingest

logger = logging.getLogger(__name__)
RETRY_AFTER_UNAVAILABLE = "30"


def _answer(outcome: ingest.Outcome) -> JsonResponse:
    return JsonResponse({"ok": True, "status": outcome.status, "job": outcome.job_id})


def _read_capped_body(request: HttpRequest) -> bytes | None:
    """The raw body, or None when it is over the cap (checked before reading it whole)."""
    limit = settings.CRCR_MAX_BODY_BYTES
    declared = request.META.get("CONTENT_LENGTH")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        return None
    body = request.read(limit + 1)
    return None if len(body) > limit else body


def ingestion_endpoint(view: Callable[[HttpRequest, bytes], JsonResponse]) -> Callable:
    """Shared frame: POST only, no CSRF (token-authenticated), 413 cap, rejections, 503."""

    @csrf_exempt
    @require_POST
    @wraps(view)
    def wrapper(request: HttpRequest) -> JsonResponse:
        body = _read_capped_body(request)
        if body is None:
            return error_response(
                413,
                "body_too_large",
                f"the body is larger than {settings.CRCR_MAX_BODY_BYTES} bytes",
            )
        try:
            return view(request, body)
        except ingest.Rejected as rejection:
            headers = {"Retry-After": str(rejection.retry_after)} if rejection.retry_after else None
            return error_response(
                rejection.http_status, rejection.code, rejection.detail, rejection.field, headers
            )
        except DatabaseError:
            # Never a 2xx for something not stored, never a 500 the action cannot act on.
            logger.exception("database unavailable during ingestion")
            return error_response(
                503,
                "unavailable",
                "the result store is unavailable; nothing was stored",
                headers={"Retry-After": RETRY_AFTER_UNAVAILABLE},
            )

    return wrapper


@ingestion_endpoint
def callback(request: HttpRequest, body: bytes) -> JsonResponse:
    """POST /github/callback: a downstream job reports in_progress or completed."""
    try:
        claims = authentication.verify_oidc_token(authentication.bearer_token(request))
        token = authentication.callback_token(claims)
    except authentication.TokenError as error:
        return error_response(401, "invalid_token", str(error))
    return _answer(ingest.receive_callback(claims["repository"], body, token))


@ingestion_endpoint
def forward(request: HttpRequest, body: bytes) -> JsonResponse:
    """POST /api/crcr/results: the relay forwards a verified callback with its metrics."""
    try:
        authentication.check_bot_key(request)
    except authentication.BotKeyError as error:
        return error_response(401, "invalid_bot_key", str(error))
    try:
        decoded = decode_json(body)
    except PayloadError as error:
        raise ingest.Rejected.from_payload_error(error) from error
    return _answer(ingest.receive_forward(decoded))
