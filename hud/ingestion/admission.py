"""Admission of a result: who may post one, how often, and with which token (once).

Steps 3–5 of CRCR.md's answer order (allowlist, level L1, rate limit), the one-use record of
callback tokens (step 2, replay) and `Rejected`, the refusal every step answers with. The
state machine that stores an admitted result is `hud.ingestion.ingest`.
"""

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from hud import levels
from hud.core import clock
from hud.core.payload import PayloadError
from hud.models import Downstream, Level, RateBucket, UsedToken, sql


class Rejected(Exception):
    """A callback refused with an HTTP status, an error code and a sentence naming why."""

    def __init__(
        self,
        http_status: int,
        code: str,
        detail: str,
        field: str | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(detail)
        self.http_status = http_status
        self.code = code
        self.detail = detail
        self.field = field
        self.retry_after = retry_after

    @classmethod
    def from_payload_error(cls, error: PayloadError) -> "Rejected":
        """Turn a body validation error into a 400."""
        return cls(400, error.code, error.detail, error.field)


@dataclass(frozen=True)
class CallbackToken:
    """The id and expiry of the token that authorised a callback (its `jti` and `exp`)."""

    jti: str
    expires_at: dt.datetime


# --- Admission ----------------------------------------------------------------------------


def admit(repo: str) -> Downstream | None:
    """Steps 3–5 of the answer order: allowlist (403), level L1 (None = ignored), rate limit."""
    downstream = levels.find_downstream(repo)
    if downstream is None or downstream.delisted:
        raise Rejected(
            403, "not_allowlisted", f"{repo} is not in the CRCR allowlist of this server"
        )
    if downstream.level < Level.L2:
        return None
    retry_after = take_rate_token(downstream)
    if retry_after is not None:
        raise Rejected(
            429,
            "rate_limited",
            f"more than {settings.CRCR_RATE_LIMIT_PER_MIN} callbacks a minute from "
            f"{downstream.full_name}; retry after {retry_after} s",
            retry_after=retry_after,
        )
    return downstream


def take_rate_token(downstream: Downstream, *, _retried: bool = False) -> int | None:
    """Take one token from the downstream's bucket; None if allowed, else seconds to wait.

    A token bucket (sustained CRCR_RATE_LIMIT_PER_MIN, burst twice that) updated by one
    conditional UPDATE, so concurrent requests and processes never over-spend it. A database
    error propagates: the caller answers 503 rather than letting the request through.
    """
    per_minute = settings.CRCR_RATE_LIMIT_PER_MIN
    capacity = 2.0 * per_minute
    per_second = per_minute / 60.0
    now = clock.now().timestamp()
    if _spend_rate_token(downstream, now, capacity, per_second):
        return None
    bucket = RateBucket.objects.filter(downstream=downstream).first()
    if bucket is None:
        try:
            with transaction.atomic():
                RateBucket.objects.create(
                    downstream=downstream, tokens=capacity - 1.0, updated_epoch=now
                )
            return None
        except IntegrityError:
            return take_rate_token(downstream)
    available = min(capacity, bucket.tokens + max(now - bucket.updated_epoch, 0.0) * per_second)
    if available >= 1.0 and not _retried:
        # A concurrent first callback created the bucket after our UPDATE looked for it: it
        # has tokens, so take one again rather than refusing (found by the fault test).
        return take_rate_token(downstream, _retried=True)
    return max(1, int((1.0 - available) / per_second + 0.999))


def _spend_rate_token(
    downstream: Downstream, now: float, capacity: float, per_second: float
) -> bool:
    """The conditional UPDATE: True when the bucket had a token (and now has one less)."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.take_rate_token(connection.vendor),
            sql.rate_token_params(downstream.id, now, capacity, per_second),
        )
        return cursor.rowcount > 0


# --- Tokens -------------------------------------------------------------------------------


def spend_token(token: CallbackToken) -> bool:
    """Record the token id; False when it was already recorded (a replay)."""
    # One statement: a replay inserts nothing instead of failing, so there is no error to
    # roll back and no savepoint to pay for. Under PostgreSQL a concurrent copy of the token
    # waits here until the first one's transaction ends, then inserts nothing.
    with connection.cursor() as cursor:
        cursor.execute(
            sql.CONSUME_JTI,
            (token.jti, connection.ops.adapt_datetimefield_value(token.expires_at)),
        )
        return cursor.rowcount > 0


def prune_used_tokens() -> int:
    """Forget token ids whose tokens have expired (a replay would fail on `exp` anyway)."""
    leeway = dt.timedelta(seconds=settings.CRCR_OIDC_LEEWAY_SECONDS)
    deleted, _ = UsedToken.objects.filter(expires_at__lt=clock.now() - leeway).delete()
    return deleted
