"""The errors and outcomes of GitHub calls (re-exported by `hud.github`).

`GitHubError` carries only the status, method, path and GitHub's own message, never a token,
and survives pickling (Celery, multiprocessing) with its keyword fields.
"""

from __future__ import annotations

import enum
from typing import Any

from django.core.exceptions import ImproperlyConfigured


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
