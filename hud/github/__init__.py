"""The one GitHub client: App JWT, installation tokens, retries, a write governor (no ORM).

Everything that talks to GitHub goes through `GitHubApp`. Two apps may be configured: the
upstream one (installed on pytorch/pytorch: check runs, comments, webhooks) and, optionally, a
dispatch app installed on the downstream repos (least privilege: the upstream app then needs no
write access to anyone's contents). `upstream_client()` and `dispatch_client()` build them from
settings; the dispatch app falls back to the upstream one when it is not configured.

Shared state (installation ids, installation tokens, the write governor) lives in Django's
cache, so several processes share it: local memory when embedded, Redis in production. Time
comes from `hud.core.clock.now()` and waiting goes through an injectable `sleep`
(`hud.github.client.sleep`), so tests never sleep through a real backoff. Tokens and keys never
reach logs, exception messages or reprs.

The modules, re-exported here: `client` (`GitHubApp`: JWT, tokens, retries, the governor),
`endpoints` (its repository calls), `errors`. This module builds the clients from settings and
holds the send lease and retry delay of rows sent to GitHub (hud.relay, hud.checks).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from django.conf import settings

from hud.github.client import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_CAP_SECONDS,
    DEFAULT_API_URL,
    DEFAULT_INSTALLATION_CACHE_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_RETRY_WAIT,
    DEFAULT_TIMEOUT,
    DEFAULT_WRITES_PER_SECOND,
    GOVERNOR_MAX_PROBES,
    JWT_BACKDATE,
    JWT_LIFETIME,
    MAX_MESSAGE_CHARS,
    RESET_MARGIN_SECONDS,
    SECONDARY_LIMIT_DEFAULT_WAIT,
    TOKEN_REFRESH_MARGIN,
    GitHubApp,
    Sleep,
)
from hud.github.endpoints import (
    CHECK_RUN_TEXT_LIMIT,
    DISPATCH_PAYLOAD_MAX_BYTES,
    DISPATCH_PAYLOAD_MAX_KEYS,
    RepoCalls,
)
from hud.github.errors import GitHubConfigError, GitHubError, NotInstalled, RerunOutcome

__all__ = [
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
    "CHECK_RUN_TEXT_LIMIT",
    "DEFAULT_API_URL",
    "DEFAULT_INSTALLATION_CACHE_SECONDS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_RETRY_WAIT",
    "DEFAULT_TIMEOUT",
    "DEFAULT_WRITES_PER_SECOND",
    "DISPATCH_PAYLOAD_MAX_BYTES",
    "DISPATCH_PAYLOAD_MAX_KEYS",
    "GOVERNOR_MAX_PROBES",
    "JWT_BACKDATE",
    "JWT_LIFETIME",
    "MAX_MESSAGE_CHARS",
    "RESET_MARGIN_SECONDS",
    "SECONDARY_LIMIT_DEFAULT_WAIT",
    "TOKEN_REFRESH_MARGIN",
    "GitHubApp",
    "GitHubConfigError",
    "GitHubError",
    "NotInstalled",
    "RepoCalls",
    "RerunOutcome",
    "Sleep",
    "dispatch_client",
    "lease_seconds",
    "mirror_enabled",
    "retry_delay",
    "upstream_client",
]


def mirror_enabled() -> bool:
    """Whether check runs and comments are sent: CRCR_CHECK_RUNS on and an upstream app set."""
    key = getattr(settings, "GITHUB_APP_PRIVATE_KEY", None) or getattr(
        settings, "GITHUB_APP_PRIVATE_KEY_FILE", None
    )
    return bool(
        getattr(settings, "CRCR_CHECK_RUNS", True) and getattr(settings, "GITHUB_APP_ID", None)
    ) and bool(key)


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
