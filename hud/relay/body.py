"""The `client_payload` of a dispatch: the upstream body, trimmed to fit GitHub's 64 KB.

Deterministic, so every downstream of a delivery receives the same body; the names of the
trimmed fields are recorded on the Dispatch (`trimmed_fields`).
"""

import copy
import json
from collections.abc import Iterable
from typing import Any

from hud import github
from hud.core.payload import cut_utf8
from hud.models import Delivery

# GitHub refuses a client_payload of 64 KB or more; keep a margin for how it counts.
CLIENT_PAYLOAD_BUDGET_BYTES = github.DISPATCH_PAYLOAD_MAX_BYTES - 1024
TRIM_MARKER = "\n\n… (trimmed by the CRCR relay: the dispatch payload must stay under 64 KB)"
# Text fields that may be long and that no backend needs whole, cut first, in this order.
TRIMMABLE_TEXT = (
    ("pull_request", "body"),
    ("head_commit", "message"),
)
# Sub-objects replaced by their identifying fields when cutting text was not enough.
COMPACTABLE_OBJECTS = (
    ("pull_request", "head", "repo"),
    ("pull_request", "base", "repo"),
    ("pull_request", "_links"),
    ("sender",),
    ("organization",),
    ("enterprise",),
    ("pusher",),
    ("installation",),
    ("repository",),
)
IDENTIFYING_KEYS = ("id", "node_id", "name", "full_name", "login", "html_url", "default_branch")
MIN_CAPPED_STRING_BYTES = 64


def _size(value: Any) -> int:
    """Bytes of `value` as JSON, counted the generous way (ASCII escapes, spaced separators)."""
    return len(json.dumps(value).encode())


def _get(container: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(container, dict):
            return None
        container = container.get(key)
    return container


def _set(container: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        container = container[key]
    container[path[-1]] = value


def client_payload(delivery: Delivery) -> tuple[dict[str, Any], list[str]]:
    """The dispatch `client_payload` of a delivery, and the payload fields trimmed to fit 64 KB.

    The upstream body goes verbatim unless the whole is too large: then long text is cut first
    (the PR body, commit messages), then bulky sub-objects are reduced to their identifying
    fields, then the longest remaining strings are cut. Deterministic, so every downstream of a
    delivery receives the same body.
    """
    payload = delivery.payload if isinstance(delivery.payload, dict) else {}
    envelope = {
        "event_type": delivery.event_type,
        "delivery_id": delivery.delivery_id,
        "payload": payload,
    }
    if _size(envelope) <= CLIENT_PAYLOAD_BUDGET_BYTES:
        return envelope, []
    payload = copy.deepcopy(payload)
    envelope["payload"] = payload
    trimmed: list[str] = []

    def over() -> int:
        return _size(envelope) - CLIENT_PAYLOAD_BUDGET_BYTES

    text_paths = list(TRIMMABLE_TEXT)
    commits = payload.get("commits")
    if isinstance(commits, list):
        text_paths += [("commits", str(i), "message") for i in range(len(commits))]
    for path in text_paths:
        excess = over()
        if excess <= 0:
            break
        value = _get_indexed(payload, path)
        if not isinstance(value, str) or not value:
            continue
        keep = len(value.encode())
        for _ in range(20):
            keep = max(0, keep - excess - _size(TRIM_MARKER))
            _set_indexed(payload, path, cut_utf8(value, keep) + TRIM_MARKER if keep else "")
            excess = over()
            if excess <= 0 or keep == 0:
                break
        trimmed.append(".".join(path))
    for path in COMPACTABLE_OBJECTS:
        if over() <= 0:
            break
        value = _get(payload, path)
        if not isinstance(value, dict):
            continue
        compact = {key: value[key] for key in IDENTIFYING_KEYS if key in value}
        owner = value.get("owner")
        if isinstance(owner, dict) and "login" in owner:
            compact["owner"] = {"login": owner["login"]}
        _set(payload, path, compact)
        trimmed.append(".".join(path))
    for _ in range(5):
        excess = over()
        if excess <= 0:
            break
        trimmed += [name for name in _cap_strings(payload, excess) if name not in trimmed]
    return envelope, trimmed


def _get_indexed(container: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if isinstance(container, list) and key.isdigit() and int(key) < len(container):
            container = container[int(key)]
        elif isinstance(container, dict):
            container = container.get(key)
        else:
            return None
    return container


def _set_indexed(container: Any, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        container = container[int(key)] if isinstance(container, list) else container[key]
    last = path[-1]
    if isinstance(container, list):
        container[int(last)] = value
    else:
        container[last] = value


def _strings(value: Any, path: tuple[str, ...] = ()) -> Iterable[tuple[tuple[str, ...], str]]:
    """Every string leaf of a JSON value with its path (list indices as digit strings)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*path, str(index)))


def _cap_strings(payload: dict, excess: int) -> list[str]:
    """Cut the longest strings to one common length that frees `excess` bytes; their names.

    Names collapse list indices (`commits[*].message`) so a long list reads as one field.
    """
    leaves = [(path, value, len(value.encode())) for path, value in _strings(payload)]
    lengths = sorted((size for _, _, size in leaves), reverse=True)
    # Water-filling: the largest cap whose cuts free at least `excess` (+ markers) bytes.
    cap, total = MIN_CAPPED_STRING_BYTES, 0
    for index, size in enumerate(lengths):
        if size <= MIN_CAPPED_STRING_BYTES + 3:
            break
        total += size
        following = lengths[index + 1] if index + 1 < len(lengths) else 0
        level = max(following, MIN_CAPPED_STRING_BYTES)
        freed = total - (index + 1) * (level + 3)  # 3: the UTF-8 bytes of the "…" marker
        if freed >= excess:
            cap = level + (freed - excess) // (index + 1)
            break
    names: list[str] = []
    for path, value, size in leaves:
        if size > cap + 3:
            _set_indexed(payload, path, cut_utf8(value, cap) + "…")
            name = ".".join("[*]" if part.isdigit() else part for part in path).replace(
                ".[*]", "[*]"
            )
            if name not in names:
                names.append(name)
    return names
