"""`GET /metrics` for Prometheus, and the middleware that counts every answer."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from hud.ops import metrics

# Ingestion views by module path (the trailing-slash routes are unnamed, the functions are not).
INGEST_ENDPOINTS = {
    "api.ingestion.callback": "callback",
    "api.ingestion.forward": "forward",
    "api.webhook.webhook": "webhook",
}
_MAX_OUTCOME_BODY = 4096


def _ingest_endpoint(request: HttpRequest) -> str | None:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return None
    func = getattr(match.func, "__wrapped__", match.func)
    return INGEST_ENDPOINTS.get(f"{func.__module__}.{func.__name__}")


def ingest_outcome(response: HttpResponse) -> str:
    """The `status` of an accepted ingestion answer or the `error` code of a refused one."""
    if getattr(response, "streaming", False) or len(response.content) > _MAX_OUTCOME_BODY:
        return "unknown"
    try:
        body = json.loads(response.content)
    except ValueError:
        return "unknown"
    if not isinstance(body, dict):
        return "unknown"
    outcome = body.get("status") if body.get("ok") else body.get("error")
    return str(outcome) if isinstance(outcome, str) and outcome.isidentifier() else "unknown"


class MetricsMiddleware:
    """Counts every answer by route pattern and code, and ingestion answers by outcome."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        """Answer, then count (the route pattern keeps the label set small)."""
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        metrics.HTTP_RESPONSES.labels(route, method, str(response.status_code)).inc()
        endpoint = _ingest_endpoint(request)
        if endpoint is not None:
            metrics.INGEST_OUTCOMES.labels(endpoint, ingest_outcome(response)).inc()
        return response


_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


def _authorised(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    if not token:
        return True
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """GET /metrics: the Prometheus text format; a bearer token when METRICS_TOKEN is set."""
    if not _authorised(request):
        response = HttpResponse("a valid bearer token is required\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    # The classic text format (what generate_latest writes): every Prometheus version reads it.
    return HttpResponse(metrics.exposition(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
