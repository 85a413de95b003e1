"""The one GitHub client: App JWT, installation tokens, retries, a write governor (no ORM).

Everything that talks to GitHub goes through `GitHubApp`. Two apps may be configured: the
upstream one (installed on pytorch/pytorch: check runs, comments, webhooks) and, optionally, a
dispatch app installed on the downstream repos (least privilege: the upstream app then needs no
write access to anyone's contents). `upstream_client()` and `dispatch_client()` build them from
settings; the dispatch app falls back to the upstream one when it is not configured.

Shared state (installation ids, installation tokens, the write governor) lives in Django's
cache, so several processes share it: local memory when embedded, Redis in production. Time
comes from `hud.core.clock.now()` and waiting goes through an injectable `sleep`, so tests never
sleep through a real backoff. Tokens and keys never reach logs, exception messages or reprs.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import json
import logging
import math
import random
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from hud.core import clock

logger = logging.getLogger(__name__)

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
CHECK_RUN_TEXT_LIMIT = 65_535
DISPATCH_PAYLOAD_MAX_BYTES = 65_536
DISPATCH_PAYLOAD_MAX_KEYS = 10

_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
_ALREADY_RUNNING_HINTS = ("already running", "is running", "already been re-run", "in progress")

Sleep = Callable[[float], None]


def mirror_enabled() -> bool:
    """Whether check runs and comments are sent: CRCR_CHECK_RUNS on and an upstream app set."""
    key = getattr(settings, "GITHUB_APP_PRIVATE_KEY", None) or getattr(
        settings, "GITHUB_APP_PRIVATE_KEY_FILE", None
    )
    return bool(
        getattr(settings, "CRCR_CHECK_RUNS", True) and getattr(settings, "GITHUB_APP_ID", None)
    ) and bool(key)


def sleep(seconds: float) -> None:
    """Block for `seconds`; tests replace this module attribute to record waits instead."""
    time.sleep(seconds)


class GitHubConfigError(ImproperlyConfigured):
    """The GitHub App settings are missing or invalid (never quotes the key)."""


class GitHubError(Exception):
    """GitHub answered with an error, or could not be reached after the retries.

    Carries only the HTTP status (None for network errors), method, path and GitHub's own
    `message`; `retryable` says whether a later attempt may succeed and `retry_after` suggests
    how many seconds a task queue should wait before that attempt (GitHub's own figure when
    it gave one).
    """

    def __init__(
        self,
        status: int | None,
        message: str,
        *,
        method: str = "",
        path: str = "",
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.method} {self.path}".strip()
        status = self.status if self.status is not None else "network error"
        return (
            f"GitHub {where} → {status}: {self.message}"
            if where
            else f"GitHub {status}: {self.message}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status!r}, {self.message!r}, path={self.path!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Celery and multiprocessing pickle exceptions; keep the keyword fields across the trip.
        keywords = {
            "method": self.method,
            "path": self.path,
            "retryable": self.retryable,
            "retry_after": self.retry_after,
        }
        return (_rebuild_error, (type(self), self.status, self.message, keywords))


def _rebuild_error(
    cls: type[GitHubError], status: int | None, message: str, keywords: dict[str, Any]
) -> GitHubError:
    return cls(status, message, **keywords)


class NotInstalled(GitHubError):
    """The app is not installed on the repository (GET /repos/{o}/{r}/installation → 404)."""


class RerunOutcome(enum.StrEnum):
    """What a re-run request achieved; an already running run is not an error."""

    REQUESTED = "requested"
    ALREADY_RUNNING = "already_running"


def _setting(name: str, default: Any = None) -> Any:
    """Read a setting, treating a missing or empty value as the default."""
    value = getattr(settings, name, default)
    return default if value in (None, "") else value


def _read_key(value: str | None, file_name: str | None, setting: str) -> str | None:
    """Return PEM text from a value or a file; a one-line `\\n`-escaped key is unescaped."""
    if not value and file_name:
        try:
            value = Path(file_name).read_text()
        except OSError as exc:
            raise GitHubConfigError(f"{setting}_FILE cannot be read ({exc.strerror})") from None
    if not value:
        return None
    if "\\n" in value and "\n" not in value.strip():
        value = value.replace("\\n", "\n")
    return value.strip() + "\n"


def _load_private_key(pem: str, setting: str) -> rsa.RSAPrivateKey:
    """Parse a PEM RSA private key without ever quoting it in an error."""
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise GitHubConfigError(f"{setting} is not a valid unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise GitHubConfigError(f"{setting} must be an RSA key (GitHub signs apps with RS256)")
    return key


def _check_repo(repo: str) -> str:
    """Validate an `owner/name` string so it can be placed in a URL path safely."""
    if not isinstance(repo, str) or not _REPO_RE.match(repo):
        raise ValueError(f"not an owner/repo name: {repo!r}")
    if any(part in (".", "..") for part in repo.split("/")):
        raise ValueError(f"not an owner/repo name: {repo!r}")
    return repo


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


def _truncate_output(fields: dict[str, Any]) -> dict[str, Any]:
    """Keep check-run `output.summary`/`output.text` within GitHub's 65,535-character limit."""
    output = fields.get("output")
    if not isinstance(output, Mapping):
        return fields
    output = dict(output)
    marker = "\n\n… (truncated)"
    for name in ("summary", "text"):
        text = output.get(name)
        if isinstance(text, str) and len(text) > CHECK_RUN_TEXT_LIMIT:
            output[name] = text[: CHECK_RUN_TEXT_LIMIT - len(marker)] + marker
    return {**fields, "output": output}


class GitHubApp:
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
        _check_repo(repo)
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
                wait = self._backoff(attempt)
            else:
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
                    return self._parse(response), response
                error, wait = self._classify(response, method, log_path, attempt)
                if not error.retryable:
                    raise error
            if attempt >= self.max_attempts or waited + wait > self.max_retry_wait:
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
                raise error
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

    # --- the relay's calls ------------------------------------------------------------------

    def dispatch(self, owner_repo: str, event_type: str, client_payload: Mapping[str, Any]) -> None:
        """Send a `repository_dispatch` event to `owner_repo` (204 on success)."""
        _check_repo(owner_repo)
        if not event_type or len(event_type) > 100:
            raise ValueError("event_type must be 1 to 100 characters")
        if len(client_payload) > DISPATCH_PAYLOAD_MAX_KEYS:
            raise ValueError(f"client_payload has more than {DISPATCH_PAYLOAD_MAX_KEYS} keys")
        size = len(json.dumps(client_payload, separators=(",", ":")).encode())
        if size >= DISPATCH_PAYLOAD_MAX_BYTES:
            raise ValueError(f"client_payload is {size} bytes; GitHub takes under 64 KB")
        self.request(
            "POST",
            f"/repos/{owner_repo}/dispatches",
            repo=owner_repo,
            json_body={"event_type": event_type, "client_payload": dict(client_payload)},
        )

    def create_check_run(self, repo: str, **fields: Any) -> dict[str, Any]:
        """Create a check run (`name` and `head_sha` required); returns GitHub's check run."""
        _check_repo(repo)
        return self.request(
            "POST", f"/repos/{repo}/check-runs", repo=repo, json_body=_truncate_output(fields)
        )

    def update_check_run(self, repo: str, check_run_id: int, **fields: Any) -> dict[str, Any]:
        """Update an existing check run; returns GitHub's check run."""
        _check_repo(repo)
        return self.request(
            "PATCH",
            f"/repos/{repo}/check-runs/{int(check_run_id)}",
            repo=repo,
            json_body=_truncate_output(fields),
        )

    def list_check_runs_for_ref(
        self, repo: str, ref: str, *, check_name: str | None = None
    ) -> list[dict[str, Any]]:
        """List the check runs on a commit (optionally by name), following pagination."""
        _check_repo(repo)
        if not re.fullmatch(r"[0-9A-Za-z._/-]+", ref) or ".." in ref:
            raise ValueError(f"not a git ref: {ref!r}")
        params: dict[str, Any] = {"per_page": 100, "filter": "all"}
        if check_name:
            params["check_name"] = check_name
        path = f"/repos/{repo}/commits/{quote(ref, safe='')}/check-runs"
        return self._paginate(path, repo, params, "check_runs")

    def rerun_failed_jobs(self, repo: str, run_id: int) -> RerunOutcome:
        """Re-run the failed jobs of a workflow run; an already running run is not an error."""
        return self._rerun(repo, run_id, "rerun-failed-jobs")

    def rerun_run(self, repo: str, run_id: int) -> RerunOutcome:
        """Re-run a whole workflow run; an already running run is not an error."""
        return self._rerun(repo, run_id, "rerun")

    def _rerun(self, repo: str, run_id: int, action: str) -> RerunOutcome:
        _check_repo(repo)
        try:
            self.request("POST", f"/repos/{repo}/actions/runs/{int(run_id)}/{action}", repo=repo)
        except GitHubError as exc:
            message = exc.message.lower()
            already = exc.status == 409 or (
                exc.status in (403, 422) and any(hint in message for hint in _ALREADY_RUNNING_HINTS)
            )
            if not already:
                raise
            logger.info(
                "github re-run skipped: already running",
                extra={"github_repo": repo, "github_run_id": int(run_id)},
            )
            return RerunOutcome.ALREADY_RUNNING
        return RerunOutcome.REQUESTED

    def list_issue_comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """List every comment on an issue or PR, following pagination."""
        _check_repo(repo)
        return self._paginate(
            f"/repos/{repo}/issues/{int(number)}/comments", repo, {"per_page": 100}, None
        )

    def create_issue_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        """Post a comment on an issue or PR; returns GitHub's comment."""
        _check_repo(repo)
        return self.request(
            "POST",
            f"/repos/{repo}/issues/{int(number)}/comments",
            repo=repo,
            json_body={"body": body},
        )

    def update_issue_comment(self, repo: str, comment_id: int, body: str) -> dict[str, Any]:
        """Replace the body of an existing comment; returns GitHub's comment."""
        _check_repo(repo)
        return self.request(
            "PATCH",
            f"/repos/{repo}/issues/comments/{int(comment_id)}",
            repo=repo,
            json_body={"body": body},
        )

    def _paginate(
        self, path: str, repo: str, params: dict[str, Any], items_key: str | None
    ) -> list[dict[str, Any]]:
        """Follow `Link: rel="next"` on the same API host and collect every item."""
        items: list[dict[str, Any]] = []
        next_path: str | None = path
        next_params: dict[str, Any] | None = params
        for _ in range(1000):
            if next_path is None:
                break
            body, response = self._request_full("GET", next_path, repo=repo, params=next_params)
            page = body.get(items_key, []) if items_key and isinstance(body, dict) else body
            items.extend(page or [])
            next_url = response.links.get("next", {}).get("url")
            next_path, next_params = None, None
            if next_url:
                # Never send the token to another host: only follow links on our API URL.
                if not next_url.startswith(self.api_url + "/"):
                    raise GitHubError(None, "pagination link left the API host", path=path)
                next_path = next_url[len(self.api_url) :]
        return items


# --- factories ------------------------------------------------------------------------------


def _client_options() -> dict[str, Any]:
    return {
        "api_url": str(_setting("GITHUB_API_URL", DEFAULT_API_URL)),
        "timeout": float(_setting("GITHUB_TIMEOUT", DEFAULT_TIMEOUT)),
        "max_attempts": int(_setting("GITHUB_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)),
        "max_retry_wait": float(_setting("GITHUB_MAX_RETRY_WAIT", DEFAULT_MAX_RETRY_WAIT)),
        "writes_per_second": float(_setting("GITHUB_WRITES_PER_SECOND", DEFAULT_WRITES_PER_SECOND)),
        "installation_cache_seconds": int(
            _setting("GITHUB_INSTALLATION_CACHE_SECONDS", DEFAULT_INSTALLATION_CACHE_SECONDS)
        ),
    }


def upstream_client(**overrides: Any) -> GitHubApp:
    """Build the upstream app's client (check runs, comments, re-runs) from settings."""
    app_id = _setting("GITHUB_APP_ID")
    key = _read_key(
        _setting("GITHUB_APP_PRIVATE_KEY"),
        _setting("GITHUB_APP_PRIVATE_KEY_FILE"),
        "GITHUB_APP_PRIVATE_KEY",
    )
    if not app_id or not key:
        raise GitHubConfigError("GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY(_FILE) must be set")
    options = {**_client_options(), "key_setting": "GITHUB_APP_PRIVATE_KEY", **overrides}
    return GitHubApp(app_id, key, **options)


def dispatch_client(**overrides: Any) -> GitHubApp:
    """Build the downstream (dispatch) app's client; falls back to the upstream app."""
    app_id = _setting("GITHUB_DISPATCH_APP_ID")
    if not app_id:
        return upstream_client(**overrides)
    key = _read_key(
        _setting("GITHUB_DISPATCH_APP_PRIVATE_KEY"),
        _setting("GITHUB_DISPATCH_APP_PRIVATE_KEY_FILE"),
        "GITHUB_DISPATCH_APP_PRIVATE_KEY",
    )
    if not key:
        raise GitHubConfigError(
            "GITHUB_DISPATCH_APP_ID is set but GITHUB_DISPATCH_APP_PRIVATE_KEY(_FILE) is not"
        )
    options = {**_client_options(), "key_setting": "GITHUB_DISPATCH_APP_PRIVATE_KEY", **overrides}
    return GitHubApp(app_id, key, **options)


# --- Leases on rows sent to GitHub (hud.relay's dispatches, hud.checks' syncs) ----------


def lease_seconds() -> float:
    """How long a claimed send owns its row: longer than one send can possibly take."""
    client_bound = float(getattr(settings, "GITHUB_TIMEOUT", None) or DEFAULT_TIMEOUT) * int(
        getattr(settings, "GITHUB_MAX_ATTEMPTS", None) or DEFAULT_MAX_ATTEMPTS
    ) + float(getattr(settings, "GITHUB_MAX_RETRY_WAIT", None) or DEFAULT_MAX_RETRY_WAIT)
    return max(float(settings.CRCR_DISPATCH_LEASE_SECONDS), client_bound + 30.0)


def retry_delay(attempts: int, retry_after: float | None) -> float:
    """Seconds before the next attempt: past the lease, GitHub's figure, jittered backoff."""
    backoff = min(3600.0, 30.0 * 2 ** max(attempts - 1, 0))
    base = max(lease_seconds(), retry_after or 0.0, backoff)
    return base + random.uniform(0, base * 0.1)
