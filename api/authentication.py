"""Who may talk to us: GitHub Actions OIDC bearer tokens (callbacks), the upstream webhook's
HMAC signature, and the relay's shared bot key (forwards).

Error sentences are shown to callers and logged, so they never echo the token or a secret.
"""

import datetime as dt
import functools
import hashlib
import hmac
import json
import logging
import math
import re
from typing import Any

import httpx
import jwt
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from hud.core import clock
from hud.ingestion import ingest

logger = logging.getLogger(__name__)

ACCEPTED_ALGORITHM = "RS256"
REQUIRED_CLAIMS = ("iss", "iat", "exp", "aud", "repository")
JWKS_FETCH_TIMEOUT_SECONDS = 5.0
# GitHub's tokens are about 1 KB; anything far larger is not one of them.
MAX_TOKEN_LENGTH = 16 * 1024
MAX_JTI_LENGTH = 200  # UsedToken.jti max_length
MAX_NUMERIC_DATE = 253402300799  # 9999-12-31T23:59:59Z, the last datetime Python holds
REPOSITORY_PATTERN = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
WEBHOOK_SIGNATURE_PREFIX = "sha256="
BOT_KEY_HEADER = "HTTP_X_HUD_INTERNAL_BOT"


class TokenError(Exception):
    """The bearer token is missing, malformed, or does not verify; `detail` says why."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class SignatureMissing(Exception):
    """The webhook carries no X-Hub-Signature-256 header (answer 400)."""

    def __init__(self, detail: str = "the X-Hub-Signature-256 header is missing") -> None:
        super().__init__(detail)
        self.detail = detail


class SignatureMismatch(Exception):
    """The webhook signature does not match the body (answer 401)."""

    def __init__(self, detail: str = "the webhook signature does not match the body") -> None:
        super().__init__(detail)
        self.detail = detail


class BotKeyError(Exception):
    """The relay bot key is missing or wrong, or the endpoint is disabled; `reason` says which."""

    def __init__(self, detail: str, reason: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.reason = reason  # "missing" | "wrong" | "disabled"


# --- JWKS ---------------------------------------------------------------------------------


def _cache_keys() -> tuple[str, str, str]:
    """Cache keys for (current JWKS, last good JWKS, last fetch stamp), scoped by JWKS URL."""
    return _cache_keys_for(settings.CRCR_OIDC_JWKS_URL)


@functools.lru_cache(maxsize=8)
def _cache_keys_for(jwks_url: str) -> tuple[str, str, str]:
    url_hash = hashlib.sha256(jwks_url.encode()).hexdigest()[:16]
    return (
        f"crcr:jwks:{url_hash}:current",
        f"crcr:jwks:{url_hash}:last-good",
        f"crcr:jwks:{url_hash}:fetched-at",
    )


def _fetch_jwks() -> dict[str, Any] | None:
    """GET the JWKS document; None (logged) when the issuer cannot give a usable one."""
    try:
        response = httpx.get(settings.CRCR_OIDC_JWKS_URL, timeout=JWKS_FETCH_TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        logger.warning("JWKS fetch failed", extra={"error": type(exc).__name__})
        return None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        logger.warning("JWKS document has no key list")
        return None
    return document


def _refresh_jwks(now: float, previous_stamp: float | None, *, exclusive: bool) -> dict | None:
    """Fetch the JWKS and store it; None if it failed or (exclusive) another process is on it."""
    current_key, last_good_key, stamp_key = _cache_keys()
    cooldown = settings.CRCR_JWKS_REFRESH_COOLDOWN_SECONDS
    # cache.add is atomic: of several processes that saw the same stale stamp, one refreshes.
    if exclusive and not cache.add(
        f"{stamp_key}:claim:{previous_stamp}", 1, timeout=max(cooldown, 1)
    ):
        return None
    cache.set(stamp_key, now, timeout=None)
    document = _fetch_jwks()
    if document is None:
        # Negative cache: for a short while no request waits on an issuer that just failed.
        cache.set(f"{stamp_key}:failed", now, timeout=settings.CRCR_JWKS_FAILURE_COOLDOWN_SECONDS)
        return None
    entry = {"fetched_at": now, "jwks": document}
    cache.set(current_key, entry, timeout=settings.CRCR_JWKS_MAX_AGE_SECONDS)
    # Kept without expiry: if the issuer is down when the current copy ages out, we still
    # verify with the keys we last saw rather than refusing every callback.
    cache.set(last_good_key, entry, timeout=None)
    return entry


def _cooldown_over(now: float, stamp: float | None) -> bool:
    """Whether enough time has passed since the last JWKS fetch attempt to try another."""
    if stamp is None or now < stamp:  # never fetched, or the clock went backwards
        return True
    return now - stamp >= settings.CRCR_JWKS_REFRESH_COOLDOWN_SECONDS


def _find_key(entry: dict[str, Any] | None, kid: str) -> jwt.PyJWK | None:
    """The RS256 signing key with this kid in a cached JWKS entry, if any."""
    if not entry:
        return None
    for candidate in entry["jwks"].get("keys", []):
        if not isinstance(candidate, dict) or candidate.get("kid") != kid:
            continue
        if candidate.get("kty") != "RSA" or candidate.get("use", "sig") != "sig":
            continue
        if candidate.get("alg", ACCEPTED_ALGORITHM) != ACCEPTED_ALGORITHM:
            continue
        try:
            return _load_key(json.dumps(candidate, sort_keys=True))
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            logger.warning("JWKS key could not be loaded", extra={"kid": kid})
    return None


@functools.lru_cache(maxsize=32)
def _load_key(jwk_json: str) -> jwt.PyJWK:
    """A published key, parsed once per process: the JWK's text is the cache key, so a
    rotated or re-published key with the same kid is parsed afresh."""
    return jwt.PyJWK(json.loads(jwk_json), algorithm=ACCEPTED_ALGORITHM)


def _signing_key(kid: str) -> jwt.PyJWK:
    """The issuer's key for `kid`: cached JWKS, refreshed when stale or on an unknown kid."""
    current_key, last_good_key, stamp_key = _cache_keys()
    now = clock.now().timestamp()
    kept = cache.get_many([stamp_key, current_key])  # one round trip to Redis, not two
    stamp, entry = kept.get(stamp_key), kept.get(current_key)
    fresh = entry is not None and 0 <= now - entry["fetched_at"] < (
        settings.CRCR_JWKS_MAX_AGE_SECONDS
    )
    attempted = False
    if not fresh:
        fallback = entry or cache.get(last_good_key)
        # With no keys at all, try unless a fetch just failed; otherwise respect the cooldown
        # so a failing issuer is not hit (and waited on) by every request.
        failed_at = cache.get(f"{stamp_key}:failed")
        failed_recently = failed_at is not None and 0 <= now - failed_at < (
            settings.CRCR_JWKS_FAILURE_COOLDOWN_SECONDS
        )
        if (fallback is None and not failed_recently) or _cooldown_over(now, stamp):
            attempted = True
            entry = _refresh_jwks(now, stamp, exclusive=fallback is not None) or fallback
        else:
            entry = fallback
    key = _find_key(entry, kid)
    if key is None and not attempted and _cooldown_over(now, stamp):
        # An unknown kid may mean the issuer rotated its keys: look again, at most once
        # per cooldown, so a flood of made-up kids cannot make us hammer the issuer.
        key = _find_key(_refresh_jwks(now, stamp, exclusive=True), kid)
    if key is not None:
        return key
    if entry is None:
        raise TokenError("the token issuer's signing keys could not be fetched")
    raise TokenError("the token was signed with a key the issuer does not publish")


# --- OIDC tokens ----------------------------------------------------------------------------


def _numeric_claim(claims: dict[str, Any], name: str) -> float:
    """A NumericDate claim as a number; TokenError when it is not one."""
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenError(f"the token's {name} claim is not a number")
    # json accepts NaN and Infinity, which would slip through every comparison below.
    if not math.isfinite(value) or abs(value) > MAX_NUMERIC_DATE:
        raise TokenError(f"the token's {name} claim is out of range")
    return float(value)


def _check_times(claims: dict[str, Any]) -> None:
    """Check exp, iat and nbf against the injectable clock, with the configured leeway."""
    now = clock.now().timestamp()
    leeway = settings.CRCR_OIDC_LEEWAY_SECONDS
    if _numeric_claim(claims, "exp") <= now - leeway:
        raise TokenError("the token has expired")
    if _numeric_claim(claims, "iat") > now + leeway:
        raise TokenError("the token was issued in the future")
    if "nbf" in claims and _numeric_claim(claims, "nbf") > now + leeway:
        raise TokenError("the token is not valid yet")


def verify_oidc_token(token: str) -> dict[str, Any]:
    """Verify a GitHub Actions OIDC token (RS256, issuer, audience, times) and return its claims."""
    if not isinstance(token, str) or not token:
        raise TokenError("the bearer token is empty")
    if len(token) > MAX_TOKEN_LENGTH:
        raise TokenError("the bearer token is too long")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise TokenError("the bearer token is not a well-formed JWT") from None
    # Decided from the header before any key is touched: no "none", no HS256 keyed with
    # the public key, nothing but the one algorithm GitHub signs with.
    if header.get("alg") != ACCEPTED_ALGORITHM:
        raise TokenError("the token is not signed with RS256, the only algorithm accepted")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise TokenError("the token header has no key id (kid)")
    key = _signing_key(kid)
    try:
        claims = jwt.decode(
            token,
            key=key,
            algorithms=[ACCEPTED_ALGORITHM],
            audience=settings.CRCR_OIDC_AUDIENCE,
            issuer=settings.CRCR_OIDC_ISSUER,
            options={
                "require": list(REQUIRED_CLAIMS),
                # Times are checked against the injectable clock below, not time.time().
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.MissingRequiredClaimError as exc:
        raise TokenError(f"the token has no {exc.claim} claim") from None
    except jwt.InvalidSignatureError:
        raise TokenError("the token signature does not verify") from None
    except jwt.InvalidAudienceError:
        raise TokenError("the token is not meant for this audience") from None
    except jwt.InvalidIssuerError:
        raise TokenError("the token was not issued by the expected issuer") from None
    except jwt.InvalidTokenError:
        raise TokenError("the bearer token is invalid") from None
    _check_times(claims)
    repository = claims.get("repository")
    if not isinstance(repository, str) or not REPOSITORY_PATTERN.fullmatch(repository):
        raise TokenError("the token's repository claim is not owner/repo")
    return claims


def bearer_token(request: HttpRequest) -> str:
    """The token of an `Authorization: Bearer <token>` header; TokenError when absent or bad."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header.strip():
        raise TokenError("the Authorization header is missing")
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        raise TokenError("the Authorization header must be 'Bearer <token>'")
    return parts[1]


def callback_token(claims: dict[str, Any]) -> ingest.CallbackToken:
    """The token's id and expiry, spent by hud.ingestion.ingest with the result; else TokenError."""
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti:
        raise TokenError("the token has no jti claim")
    if len(jti) > MAX_JTI_LENGTH:
        raise TokenError("the token's jti claim is too long")
    expires_at = dt.datetime.fromtimestamp(_numeric_claim(claims, "exp"), tz=dt.UTC)
    return ingest.CallbackToken(jti, expires_at)


# --- Webhook HMAC and bot key -------------------------------------------------------------


def verify_webhook_signature(secret: bytes, body: bytes, header: str | None) -> None:
    """Check `X-Hub-Signature-256: sha256=<hex>`; SignatureMissing or SignatureMismatch if not."""
    if not header or not header.strip():
        raise SignatureMissing()
    if not secret:
        # An empty secret would let anyone sign; refuse rather than verify against it.
        raise SignatureMismatch("the webhook secret is not configured")
    expected = (
        WEBHOOK_SIGNATURE_PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()
    ).encode()
    provided = header.strip().lower().encode("utf-8", errors="replace")
    if not hmac.compare_digest(expected, provided):
        raise SignatureMismatch()


def check_bot_key(request: HttpRequest) -> None:
    """Check the relay's `x-hud-internal-bot` key in constant time; BotKeyError if not right."""
    expected = settings.HUD_BOT_KEY
    if not expected:
        raise BotKeyError("the forward endpoint is disabled: HUD_BOT_KEY is not set", "disabled")
    provided = request.META.get(BOT_KEY_HEADER)
    if not provided:
        raise BotKeyError("the x-hud-internal-bot header is missing", "missing")
    if not hmac.compare_digest(
        expected.encode("utf-8"), provided.encode("utf-8", errors="replace")
    ):
        raise BotKeyError("the x-hud-internal-bot key is wrong", "wrong")
