"""Upstream webhook bodies: the shape of the fields we read, and what a payload says of its PR.

`check_webhook` refuses, naming the field, a webhook whose fields have the wrong shape (the
relay endpoint); `upstream_context` reads the head SHA, PR number, title, ref and labels out of
the upstream payload a callback carries (`hud.core.payload.parse_callback`). Pure: no ORM.
"""

from typing import Any

from hud.core import inputs
from hud.core.inputs import PayloadError


def _label_names(labels: Any, path: str) -> tuple[str, ...]:
    """The names of a pull request's labels: a list of objects with string names."""
    if labels is None:
        return ()
    if not isinstance(labels, list):
        raise PayloadError(f"{path} must be a list", path)
    names = []
    for index, label in enumerate(labels):
        name = label.get("name") if isinstance(label, dict) else None
        if not isinstance(name, str):
            raise PayloadError(f"{path}[{index}].name must be a string", f"{path}[{index}].name")
        names.append(name)
    return tuple(name for name in names if name)


def _webhook_text(container: dict, key: str, path: str) -> None:
    value = container.get(key)
    if value is not None and not isinstance(value, str):
        raise PayloadError(f"{path} must be a string", path)


def _webhook_object(container: dict, key: str, path: str) -> dict:
    value = container.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"{path} must be an object", path)
    return value


def check_webhook(event: str, body: dict) -> None:
    """Refuse, naming the field, an upstream webhook whose fields we read have the wrong shape."""
    _webhook_text(body, "action", "action")
    repository = _webhook_object(body, "repository", "repository")
    _webhook_text(repository, "full_name", "repository.full_name")
    if event == "pull_request":
        pull_request = _webhook_object(body, "pull_request", "pull_request")
        number = pull_request.get("number")
        if number is not None and (isinstance(number, bool) or not isinstance(number, int)):
            raise PayloadError("pull_request.number must be a whole number", "pull_request.number")
        if number is not None:
            inputs.integer_in_range(number, "pull_request.number", 0, inputs.INT64_MAX)
        _webhook_text(pull_request, "title", "pull_request.title")
        for side in ("head", "base"):
            part = _webhook_object(pull_request, side, f"pull_request.{side}")
            _webhook_text(part, "sha", f"pull_request.{side}.sha")
            _webhook_text(part, "ref", f"pull_request.{side}.ref")
        _label_names(pull_request.get("labels"), "pull_request.labels")
        _webhook_text(_webhook_object(body, "label", "label"), "name", "label.name")
    elif event == "push":
        for key in ("ref", "after", "before"):
            _webhook_text(body, key, key)
    elif event in ("check_run", "check_suite"):
        _webhook_text(_webhook_object(body, event, event), "head_sha", f"{event}.head_sha")


def upstream_context(
    delivery_id: str, payload: dict
) -> tuple[str, str | None, int, str, str, tuple[str, ...]]:
    """(head SHA, the field it came from, PR number, PR title, ref, labels) of a payload."""
    pull_request = payload.get("pull_request") if isinstance(payload, dict) else None
    if isinstance(pull_request, dict):
        head = pull_request.get("head") if isinstance(pull_request.get("head"), dict) else {}
        sha, sha_field = head.get("sha"), "payload.pull_request.head.sha"
        number = pull_request.get("number")
        labels = _label_names(pull_request.get("labels"), "payload.pull_request.labels")
        title = pull_request.get("title") if isinstance(pull_request.get("title"), str) else ""
        pr_number = 0
        if number is not None:
            if isinstance(number, bool) or not isinstance(number, int):
                raise PayloadError(
                    "payload.pull_request.number must be a whole number",
                    "payload.pull_request.number",
                )
            pr_number = inputs.integer_in_range(
                number, "payload.pull_request.number", 0, inputs.INT64_MAX
            )
        if isinstance(sha, str) and sha:
            return sha, sha_field, pr_number, title[:300], "", labels
        return delivery_id, None, pr_number, title[:300], "", labels
    payload = payload if isinstance(payload, dict) else {}
    ref = payload.get("ref") if isinstance(payload.get("ref"), str) else ""
    for key in ("head_sha", "after"):
        sha = payload.get(key)
        if isinstance(sha, str) and sha:
            return sha, f"payload.{key}", 0, "", ref, ()
    return delivery_id, None, 0, "", ref, ()
