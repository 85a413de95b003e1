"""`GET /api/v1/backends/<org>/<repo>/gates[?as_of=]`: a backend's gate evaluation."""

import datetime as dt

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hud import promotion
from hud.core import clock, inputs
from hud.reads import selectors


def parse_as_of(raw: str | None) -> dt.datetime | None:
    """`as_of`: an ISO date (the end of that UTC day) or an ISO time, never in the future."""
    if not raw:
        return None
    try:
        moment = inputs.aware_time(raw, "as_of", default_utc=True)
    except inputs.PayloadError as exc:
        raise ValidationError({"as_of": ["must be an ISO date or time, e.g. 2026-11-01"]}) from exc
    # A bare date means the end of that UTC day.
    moment = moment + dt.timedelta(days=1) if len(raw) == 10 else moment
    if moment > clock.now():
        # The future's jobs are unknown: such an evaluation would read as settled and is not.
        raise ValidationError({"as_of": ["must not be in the future"]})
    return moment


class BackendGates(APIView):
    """Promotion to the next level and keep/demote at the current one, criterion by criterion."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "as_of",
                OpenApiTypes.STR,
                description="ISO date (end of that day) or time; default now",
            )
        ],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request, org: str, repo: str) -> Response:
        """The evaluation with every criterion's value, interval, threshold, n and status."""
        backend = selectors.backend(f"{org}/{repo}")
        if backend is None:
            raise Http404(f"no backend {org}/{repo}")
        as_of = parse_as_of(request.query_params.get("as_of"))
        return Response(promotion.evaluate_backend(backend, as_of=as_of).to_dict())
