"""`GET /api/v1/gate/<sha>`: the L4 merge gate of a commit, as the `crcr/gate` check shows it."""

import re

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hud.checks import mirror

_SHA_RE = re.compile(r"^[0-9a-fA-F]{7,64}$")


class MergeGate(APIView):
    """The gate decision: state, blocking, pending and non-blocking jobs, the rule in words."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, sha: str) -> Response:
        """The same decision the `crcr/gate` check run carries (hud.checks.mirror.gate_decision)."""
        if not _SHA_RE.match(sha):
            raise Http404(f"{sha[:80]} is not a commit SHA")
        decision = mirror.gate_state(sha.lower())
        if not decision["dispatched"]:
            # Deciding "success" for a commit nothing was dispatched for would invite a merge
            # before the webhook arrived; say that nothing is known instead.
            raise Http404(f"nothing was dispatched for {sha[:40]}: the gate is not decided")
        return Response(decision)
