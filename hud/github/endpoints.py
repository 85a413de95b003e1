"""The repository calls of `GitHubApp`: dispatches, check runs, re-runs, comments, pagination.

A mixin: `hud.github.client.GitHubApp` inherits it and supplies `request`, `_request_full` and
`api_url`. Every path is built from a checked `owner/repo` and whole numbers, so nothing a
caller passes can leave the repository's endpoints.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from hud.github.errors import GitHubError, RerunOutcome

# One logger for the whole client, named for the package (log filters and tests use it).
logger = logging.getLogger("hud.github")

CHECK_RUN_TEXT_LIMIT = 65_535
DISPATCH_PAYLOAD_MAX_BYTES = 65_536
DISPATCH_PAYLOAD_MAX_KEYS = 10

_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_ALREADY_RUNNING_HINTS = ("already running", "is running", "already been re-run", "in progress")


def check_repo(repo: str) -> str:
    """Validate an `owner/name` string so it can be placed in a URL path safely."""
    if not isinstance(repo, str) or not _REPO_RE.match(repo):
        raise ValueError(f"not an owner/repo name: {repo!r}")
    if any(part in (".", "..") for part in repo.split("/")):
        raise ValueError(f"not an owner/repo name: {repo!r}")
    return repo


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


class RepoCalls:
    """The endpoints the relay and the mirror call, on top of `GitHubApp.request`."""

    def dispatch(self, owner_repo: str, event_type: str, client_payload: Mapping[str, Any]) -> None:
        """Send a `repository_dispatch` event to `owner_repo` (204 on success)."""
        check_repo(owner_repo)
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
        check_repo(repo)
        return self.request(
            "POST", f"/repos/{repo}/check-runs", repo=repo, json_body=_truncate_output(fields)
        )

    def update_check_run(self, repo: str, check_run_id: int, **fields: Any) -> dict[str, Any]:
        """Update an existing check run; returns GitHub's check run."""
        check_repo(repo)
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
        check_repo(repo)
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
        check_repo(repo)
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
        check_repo(repo)
        return self._paginate(
            f"/repos/{repo}/issues/{int(number)}/comments", repo, {"per_page": 100}, None
        )

    def create_issue_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        """Post a comment on an issue or PR; returns GitHub's comment."""
        check_repo(repo)
        return self.request(
            "POST",
            f"/repos/{repo}/issues/{int(number)}/comments",
            repo=repo,
            json_body={"body": body},
        )

    def update_issue_comment(self, repo: str, comment_id: int, body: str) -> dict[str, Any]:
        """Replace the body of an existing comment; returns GitHub's comment."""
        check_repo(repo)
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
