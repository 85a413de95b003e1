"""`GitHubApp`: the App JWT, installation tokens, bounded retries and the write governor.

The plumbing every call goes through; the repository calls themselves are the `RepoCalls`
mixin (`hud.github.endpoints`). Shared state (installation ids, tokens, the governor's slots)
lives in Django's cache. Waiting goes through this module's `sleep`, which tests replace.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.cache import cache

from hud.core import clock
from hud.github.endpoints import RepoCalls, check_repo
from hud.github.errors import GitHubConfigError, GitHubError, NotInstalled

# One logger for the whole client, named for the package (log filters and tests use it).
logger = logging.getLogger("hud.github")

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_MAX_RETRY_WAIT = 60.0
DEFAULT_WRITES_PER_SECOND = 1.0
DEFAULT_INSTALLATION_CACHE_SECONDS = 3600

JWT_BACKDATE = dt.timedelta(seconds=60)
JWT_LIFETIME = dt.timedelta(minutes=9)
TOKEN_REFRESH_MARGIN = dt.timedelta(minutes=5)
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 30.0
# GitHub: "if no retry-after or x-ratelimit headers, wait at least one minute" (secondary limit).
SECONDARY_LIMIT_DEFAULT_WAIT = 60.0
# Margin added to x-ratelimit-reset so a slightly fast clock does not retry a second too early.
RESET_MARGIN_SECONDS = 1.0
GOVERNOR_MAX_PROBES = 600
MAX_MESSAGE_CHARS = 300

_WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})

Sleep = Callable[[float], None]


def sleep(seconds: float) -> None:
    """Block for `seconds`; tests replace this module attribute to record waits instead."""
    time.sleep(seconds)


def _load_private_key(pem: str, setting: str) -> rsa.RSAPrivateKey:
    """Parse a PEM RSA private key without ever quoting it in an error."""
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise GitHubConfigError(f"{setting} is not a valid unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise GitHubConfigError(f"{setting} must be an RSA key (GitHub signs apps with RS256)")
    return key


def _parse_time(value: str) -> dt.datetime:
    """Parse GitHub's ISO 8601 timestamps (with a trailing Z) as aware datetimes."""
    moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _error_message(response: httpx.Response) -> str:
    """Extract GitHub's `message` (nothing else from the body), shortened."""
    try:
        body = response.json()
    except ValueError:
        body = None
    message = body.get("message") if isinstance(body, dict) else None
    if not isinstance(message, str) or not message:
        message = response.reason_phrase or "error"
    return message[:MAX_MESSAGE_CHARS]


def _float_header(response: httpx.Response, name: str) -> float | None:
    """Return a numeric header as a float, or None when absent or malformed."""
    raw = response.headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class GitHubApp(RepoCalls):
    """A GitHub App client: JWT, installation tokens, bounded retries and a write governor."""

    def __init__(
        self,
        app_id: str | int,
        private_key: str,
        *,
        api_url: str = DEFAULT_API_URL,
        timeout: float = DEFAULT_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        writes_per_second: float = DEFAULT_WRITES_PER_SECOND,
        installation_cache_seconds: int = DEFAULT_INSTALLATION_CACHE_SECONDS,
        sleep: Sleep | None = None,
        rng: Callable[[], float] = random.random,
        transport: httpx.BaseTransport | None = None,
        key_setting: str = "private_key",
    ) -> None:
        if not str(app_id).strip():
            raise GitHubConfigError("a GitHub App id is required")
        if not private_key:
            raise GitHubConfigError(f"{key_setting} is required")
        self.app_id = str(app_id).strip()
        self._private_key = _load_private_key(private_key, key_setting)
        self.api_url = api_url.rstrip("/")
        self.timeout = float(timeout)
        self.max_attempts = max(1, int(max_attempts))
        self.max_retry_wait = float(max_retry_wait)
        self.writes_per_second = float(writes_per_second)
        self.installation_cache_seconds = int(installation_cache_seconds)
        self._sleep = sleep
        self._rng = rng
        self._transport = transport
        self._http: httpx.Client | None = None
        # Cache keys are namespaced by API host and app so two apps never share tokens.
        scope = hashlib.sha256(f"{self.api_url}|{self.app_id}".encode()).hexdigest()[:12]
        self._cache_prefix = f"github:{scope}"

    def __repr__(self) -> str:
        return f"<GitHubApp app_id={self.app_id} api_url={self.api_url}>"

    # --- plumbing ---------------------------------------------------------------------------

    @property
    def http(self) -> httpx.Client:
        """The underlying httpx client (created on first use, every call has a timeout)."""
        if self._http is None:
            self._http = httpx.Client(
                base_url=self.api_url,
                timeout=httpx.Timeout(self.timeout),
                transport=self._transport,
                headers={
                    "Accept": "application/vnd.github+json",
                    "X-GitHub-Api-Version": "2022-11-28",
                    "User-Agent": "crcr-hud",
                },
                follow_redirects=False,
            )
        return self._http

    def close(self) -> None:
        """Close the connection pool."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> GitHubApp:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _wait(self, seconds: float) -> None:
        """Sleep through the injected sleep, or this module's (patchable) `sleep`."""
        if seconds <= 0:
            return
        (self._sleep or globals()["sleep"])(seconds)

    # --- authentication ---------------------------------------------------------------------

    def app_jwt(self) -> str:
        """Return a fresh app JWT: RS256, iat 60 s back, exp 9 min ahead, iss = app id."""
        now = clock.now()
        claims = {
            "iat": int((now - JWT_BACKDATE).timestamp()),
            "exp": int((now + JWT_LIFETIME).timestamp()),
            "iss": self.app_id,
        }
        return jwt.encode(claims, self._private_key, algorithm="RS256")

    def installation_id(self, repo: str) -> int:
        """Return the app's installation id for `repo` (cached); NotInstalled when absent."""
        check_repo(repo)
        key = f"{self._cache_prefix}:installation:{repo.lower()}"
        cached = cache.get(key)
        if cached is not None:
            return int(cached)
        try:
            body = self._send("GET", f"/repos/{repo}/installation", auth=self._jwt_header())
        except GitHubError as exc:
            if exc.status == 404:
                raise NotInstalled(
                    404,
                    f"the GitHub App is not installed on {repo}",
                    method="GET",
                    path=f"/repos/{repo}/installation",
                ) from None
            raise
        installation = int(body["id"])
        cache.set(key, installation, timeout=self.installation_cache_seconds)
        return installation

    def installation_token(self, installation_id: int) -> str:
        """Return an installation token, cached until 5 minutes before it expires."""
        key = self._token_key(installation_id)
        cached = cache.get(key)
        now = clock.now()
        if isinstance(cached, dict) and _parse_time(cached["expires_at"]) > now:
            return cached["token"]
        body = self._send(
            "POST",
            f"/app/installations/{int(installation_id)}/access_tokens",
            auth=self._jwt_header(),
        )
        token = body["token"]
        expires_at = _parse_time(body["expires_at"])
        usable_until = expires_at - TOKEN_REFRESH_MARGIN
        lifetime = int((usable_until - now).total_seconds())
        if lifetime > 0:
            cache.set(key, {"token": token, "expires_at": usable_until.isoformat()}, lifetime)
        logger.info(
            "github installation token issued",
            extra={
                "github_app_id": self.app_id,
                "github_installation_id": int(installation_id),
                "github_token_expires_at": expires_at.isoformat(),
            },
        )
        return token

    def forget_installation(self, repo: str, installation_id: int | None = None) -> None:
        """Drop cached installation id and token (after a 401, or an uninstall)."""
        cache.delete(f"{self._cache_prefix}:installation:{repo.lower()}")
        if installation_id is not None:
            cache.delete(self._token_key(installation_id))

    def _token_key(self, installation_id: int) -> str:
        return f"{self._cache_prefix}:token:{int(installation_id)}"

    def _jwt_header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.app_jwt()}"}

    # --- the write governor -----------------------------------------------------------------

    def _governor_wait(self, installation_id: int) -> None:
        """Space writes to at most `writes_per_second` per installation, across processes.

        Time is cut into slots of 1/N s; a writer claims the first free slot at or after now
        with the atomic `cache.add`, then waits for that slot to start. A hint key remembers the
        last claimed slot so a queue of writers does not probe from the start each time.
        """
        if self.writes_per_second <= 0:
            return
        interval = 1.0 / self.writes_per_second
        now = clock.now().timestamp()
        current = math.floor(now / interval)
        prefix = f"{self._cache_prefix}:governor:{int(installation_id)}"
        hint = cache.get(f"{prefix}:hint")
        slot = max(current, int(hint) + 1) if isinstance(hint, int) else current
        for _ in range(GOVERNOR_MAX_PROBES):
            if cache.add(f"{prefix}:{slot}", 1, timeout=max(60, int(4 * interval) + 60)):
                break
            slot += 1
        cache.set(f"{prefix}:hint", slot, timeout=max(60, int(4 * interval) + 60))
        wait = slot * interval - now
        if wait > 0:
            logger.debug(
                "github write governor wait",
                extra={"github_installation_id": int(installation_id), "github_wait": wait},
            )
            self._wait(wait)

    # --- requests ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        repo: str,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call a repository endpoint with the installation token of `repo`; returns the JSON."""
        return self._request_full(method, path, repo=repo, json_body=json_body, params=params)[0]

    def _request_full(
        self,
        method: str,
        path: str,
        *,
        repo: str,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> tuple[Any, httpx.Response]:
        installation = self.installation_id(repo)
        if method.upper() in _WRITE_METHODS:
            self._governor_wait(installation)
        for renewed in (False, True):
            try:
                token = self.installation_token(installation)
            except GitHubError as exc:
                if exc.status != 404:
                    raise
                # The installation is gone (app uninstalled since we cached its id).
                self.forget_installation(repo, installation)
                raise NotInstalled(
                    404, f"the GitHub App is not installed on {repo}", method=method, path=path
                ) from None
            try:
                return self._send_full(
                    method,
                    path,
                    auth={"Authorization": f"Bearer {token}"},
                    json_body=json_body,
                    params=params,
                )
            except GitHubError as exc:
                # A revoked or rotated token: forget it and try once more with a fresh one.
                if exc.status != 401 or renewed:
                    raise
                self.forget_installation(repo, installation)
                installation = self.installation_id(repo)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, method: str, path: str, *, auth: dict[str, str], **kwargs: Any) -> Any:
        return self._send_full(method, path, auth=auth, **kwargs)[0]

    def _send_full(
        self,
        method: str,
        path: str,
        *,
        auth: dict[str, str],
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> tuple[Any, httpx.Response]:
        """Send one request with bounded retries; return (parsed JSON or None, response)."""
        method = method.upper()
        log_path = path.split("?", 1)[0]
        waited = 0.0
        attempt = 0
        while True:
            attempt += 1
            response, error, wait = self._attempt(
                method, path, log_path, attempt, auth=auth, json_body=json_body, params=params
            )
            if response is not None:
                return self._parse(response), response
            if attempt >= self.max_attempts or waited + wait > self.max_retry_wait:
                raise _gave_up(error, wait, method, log_path, attempt, waited)
            logger.warning(
                "github request retrying",
                extra={
                    "github_method": method,
                    "github_path": log_path,
                    "github_status": error.status,
                    "github_message": error.message,
                    "github_attempt": attempt,
                    "github_wait": round(wait, 3),
                },
            )
            self._wait(wait)
            waited += wait

    def _attempt(
        self,
        method: str,
        path: str,
        log_path: str,
        attempt: int,
        *,
        auth: dict[str, str],
        json_body: Any,
        params: Mapping[str, Any] | None,
    ) -> tuple[httpx.Response | None, GitHubError | None, float]:
        """One try: (the response, if it succeeded; else the error and the wait before a retry).

        An error no retry can mend is raised at once.
        """
        started = time.monotonic()
        try:
            response = self.http.request(
                method,
                path,
                headers=auth,
                json=json_body,
                params=dict(params) if params else None,
            )
        except httpx.TransportError as exc:
            error = GitHubError(
                None,
                f"{type(exc).__name__} talking to GitHub",
                method=method,
                path=log_path,
                retryable=True,
            )
            return None, error, self._backoff(attempt)
        elapsed = time.monotonic() - started
        logger.debug(
            "github request",
            extra={
                "github_method": method,
                "github_path": log_path,
                "github_status": response.status_code,
                "github_attempt": attempt,
                "github_elapsed": round(elapsed, 3),
            },
        )
        if response.status_code < 400:
            return response, None, 0.0
        error, wait = self._classify(response, method, log_path, attempt)
        if not error.retryable:
            raise error
        return None, error, wait

    @staticmethod
    def _parse(response: httpx.Response) -> Any:
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter: uniform in [0, min(cap, base·2^(n-1))]."""
        ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))
        return self._rng() * ceiling

    def _classify(
        self, response: httpx.Response, method: str, path: str, attempt: int
    ) -> tuple[GitHubError, float]:
        """Turn an error response into a GitHubError and the wait before the next attempt."""
        status = response.status_code
        message = _error_message(response)
        retry_after = _float_header(response, "retry-after")
        remaining = _float_header(response, "x-ratelimit-remaining")
        reset = _float_header(response, "x-ratelimit-reset")
        secondary = "secondary rate limit" in message.lower()
        primary = remaining == 0 and reset is not None
        rate_limited = status == 429 or (
            status == 403 and (retry_after is not None or secondary or primary)
        )
        retryable = status >= 500 or rate_limited
        if retry_after is not None and (rate_limited or status >= 500):
            wait = max(0.0, retry_after)
        elif primary and (rate_limited or status >= 500):
            wait = max(0.0, reset - clock.now().timestamp()) + RESET_MARGIN_SECONDS
        elif secondary:
            wait = SECONDARY_LIMIT_DEFAULT_WAIT
        else:
            wait = self._backoff(attempt)
        error = GitHubError(
            status,
            message,
            method=method,
            path=path,
            retryable=retryable,
            retry_after=wait if rate_limited else None,
        )
        return error, wait


def _gave_up(
    error: GitHubError, wait: float, method: str, log_path: str, attempt: int, waited: float
) -> GitHubError:
    """The error to raise when the retries are spent (with the wait GitHub or backoff asked)."""
    if wait and error.retry_after is None:
        error.retry_after = wait
    logger.warning(
        "github request gave up",
        extra={
            "github_method": method,
            "github_path": log_path,
            "github_status": error.status,
            "github_attempt": attempt,
            "github_waited": round(waited, 3),
        },
    )
    return error
