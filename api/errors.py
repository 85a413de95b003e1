"""One error body everywhere: {"ok": false, "error": code, "detail": sentence, "field": path}."""

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from hud.core.inputs import error_body


def error_response(
    http_status: int,
    code: str,
    detail: str,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JsonResponse:
    """A plain Django JSON error response (for views outside DRF)."""
    response = JsonResponse(error_body(code, detail, field), status=http_status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _first_field_error(detail: Any, prefix: str = "") -> tuple[str | None, str]:
    """Find the first (dotted field path, message) in a DRF ValidationError detail."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors":
                path = prefix
            return _first_field_error(value, path)
    if isinstance(detail, list) and detail:
        return _first_field_error(detail[0], prefix)
    return (prefix or None), str(detail)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Render DRF exceptions in the shared error body."""
    # DRF maps Django's own exceptions too; map them here first so the body gets a real code.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_field_error(exc.detail)
        detail = f"{field}: {message}" if field else message
        response.data = error_body("invalid", detail, field)
        response.status_code = status.HTTP_400_BAD_REQUEST
    else:
        code = getattr(exc, "default_code", "error")
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        response.data = error_body(str(code), str(detail))
    return response
