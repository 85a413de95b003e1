"""Upstream webhook events → stored deliveries → one repository_dispatch per downstream.

The webhook view verifies the signature and calls `receive_webhook`, which stores the delivery
and its Dispatch rows (outcome `pending`) in one transaction and enqueues one `send_dispatch`
task per row on commit, so the answer to GitHub never waits on GitHub or the broker.

Each dispatch is sent at most once at a time and never again once sent: a task first claims
the row with a conditional UPDATE (`outcome = pending` and no live lease), and only the claimer
talks to GitHub. While a dispatch is pending, `dispatched_at` holds the time of its last
attempt (the lease); once sent it holds the time GitHub accepted it, which is what callbacks
measure queue time from. Retryable failures stay `pending` with the reason; `reconcile`
re-enqueues what a lost enqueue, a crashed worker or the in-process pool left behind.

`dispatch_states` and `liveness` are the reads: which results each delivery should produce,
and which backends answered them (a silent L2+ backend becomes `no_response`).
"""

import copy
import dataclasses
import datetime as dt
import enum
import fnmatch
import hashlib
import json
import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q

from hud import github
from hud.checks import mirror
from hud.core import clock, taskqueue
from hud.core.payload import cut_utf8
from hud.levels import effective_levels
from hud.models import Delivery, Dispatch, Downstream, Job, Level, claims
from hud.reads import selectors

logger = logging.getLogger(__name__)

RELAYED_EVENTS = ("pull_request", "push")
HANDLED_EVENTS = ("pull_request", "push", "check_run", "check_suite")
DISPATCHED_PR_ACTIONS = frozenset({"opened", "synchronize", "reopened", "closed"})
CRCR_LABEL_PREFIX = "ciflow/crcr/"
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
REASON_MAX_CHARS = 500
MIN_CAPPED_STRING_BYTES = 64
# The send lease and retry delay are hud.github's (one copy, shared with hud.checks).
lease_seconds = github.lease_seconds
retry_delay = github.retry_delay
no_response_after = selectors.no_response_after


class WebhookStatus(enum.StrEnum):
    """What a webhook delivery led to (the `status` of the answer)."""

    DISPATCHED = "dispatched"  # stored, dispatch rows created and their sends enqueued
    STORED = "stored"  # stored, nothing to dispatch (action, ref, deletion, no downstream)
    DUPLICATE = "duplicate"  # same GUID or same raw body as a stored delivery: no side effect
    IGNORED = "ignored"  # not an event the relay handles, or another repository: not stored


@dataclasses.dataclass(frozen=True)
class WebhookOutcome:
    """The answer to one webhook delivery."""

    status: WebhookStatus
    detail: str
    delivery_id: str | None = None
    dispatches: int = 0


class SendResult(enum.StrEnum):
    """What one `send_dispatch` call did."""

    SENT = "sent"
    NOT_INSTALLED = "not_installed"
    FAILED = "failed"  # permanently: validation, configuration, or attempts exhausted
    RETRY = "retry"  # a retryable failure; the row stays pending
    SKIPPED = "skipped"  # not ours to send: already sent, given up, or claimed by another


@dataclasses.dataclass(frozen=True)
class SendOutcome:
    """The result of a send attempt, and when a retry may be tried (seconds), if any."""

    result: SendResult
    retry_in: float | None = None


# --- webhook → delivery ---------------------------------------------------------------------


def delivery_fields(event: str, body: dict[str, Any]) -> dict[str, Any]:
    """The columns of a Delivery read from an upstream webhook body."""
    pull_request = body.get("pull_request") or {}
    if event == "pull_request" and isinstance(pull_request, dict):
        head = pull_request.get("head") or {}
        base = pull_request.get("base") or {}
        labels = [
            str(label.get("name"))
            for label in pull_request.get("labels") or []
            if isinstance(label, dict) and label.get("name")
        ]
        # `labeled`: the label just added (GitHub also lists it under pull_request.labels,
        # but a delivery built by hand may not); part 2 back-fills L3 check runs from it.
        user = pull_request.get("user") or {}
        added = body.get("label")
        if isinstance(added, dict) and added.get("name") and str(added["name"]) not in labels:
            labels.append(str(added["name"]))
        return {
            "action": str(body.get("action") or "")[:40],
            "pr_number": _int(pull_request.get("number")),
            "pr_title": str(pull_request.get("title") or "")[:300],
            "pr_author": str(user.get("login") or "")[:100] if isinstance(user, dict) else "",
            "head_sha": str(head.get("sha") or "")[:64] if isinstance(head, dict) else "",
            "base_sha": str(base.get("sha") or "")[:64] if isinstance(base, dict) else "",
            "base_ref": str(base.get("ref") or "")[:255] if isinstance(base, dict) else "",
            "labels": labels,
        }
    if event == "push":
        return {
            "action": "deleted" if body.get("deleted") else "",
            "head_sha": str(body.get("after") or "")[:64],
            "base_sha": str(body.get("before") or "")[:64],
            "ref": str(body.get("ref") or "")[:255],
        }
    if event in ("check_run", "check_suite"):
        inner = body.get(event) if isinstance(body.get(event), dict) else {}
        return {
            "action": str(body.get("action") or "")[:40],
            "head_sha": str(inner.get("head_sha") or "")[:64],
        }
    return {"action": str(body.get("action") or "")[:40]}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def record_delivery(
    delivery_id: str, event: str, body: dict[str, Any], raw_body: bytes, received_at: dt.datetime
) -> tuple[Delivery, bool]:
    """Store a delivery once; (delivery, created). The same GUID or raw body is a duplicate."""
    body_sha256 = hashlib.sha256(raw_body).hexdigest()
    existing = (
        Delivery.objects.filter(delivery_id=delivery_id).first()
        or Delivery.objects.filter(body_sha256=body_sha256).first()
    )
    if existing is not None:
        return existing, False
    repository = body.get("repository") or {}
    try:
        with transaction.atomic():
            delivery = Delivery.objects.create(
                delivery_id=delivery_id,
                event_type=event,
                upstream_repo=str(repository.get("full_name") or "")[:200],
                received_at=received_at,
                body_sha256=body_sha256,
                # Stored as sent: hud.core.payload.decode_json refused what jsonb cannot hold.
                payload=body,
                **delivery_fields(event, body),
            )
    except IntegrityError:
        # A concurrent redelivery won; it is the same delivery.
        return (
            Delivery.objects.filter(delivery_id=delivery_id).first()
            or Delivery.objects.get(body_sha256=body_sha256)
        ), False
    return delivery, True


def push_ref_matches(ref: str, patterns: Iterable[str] | None = None) -> bool:
    """Whether a pushed ref is one CRCR_PUSH_REFS dispatches; `*` also spans `/`.

    `refs/tags/ciflow/*` must match PyTorch's `refs/tags/ciflow/<label>/<pr number>` tags.
    """
    if patterns is None:
        patterns = settings.CRCR_PUSH_REFS
    return any(fnmatch.fnmatchcase(ref, pattern) for pattern in patterns)


def dispatch_decision(event: str, body: dict[str, Any]) -> tuple[bool, str]:
    """(dispatch?, why) for a stored upstream delivery (CRCR.md, "Dispatch", "Pushes")."""
    if event == "pull_request":
        action = str(body.get("action") or "")
        if action in DISPATCHED_PR_ACTIONS:
            return True, f"pull_request {action}"
        label = body.get("label") if isinstance(body.get("label"), dict) else {}
        name = str(label.get("name") or "")
        if action == "labeled" and name.startswith(CRCR_LABEL_PREFIX):
            return False, f"label {name} recorded on the delivery for L3 check runs"
        return False, f"pull_request action {action or '(none)'} is not dispatched"
    if event == "push":
        ref = str(body.get("ref") or "")
        if body.get("deleted"):
            return False, f"push deletes {ref}; deletions are not dispatched"
        if not push_ref_matches(ref):
            return False, f"push to {ref} does not match CRCR_PUSH_REFS"
        return True, f"push to {ref}"
    return False, f"{event} events are stored, not dispatched"


def receive_webhook(
    delivery_id: str, event: str, body: dict[str, Any], raw_body: bytes
) -> WebhookOutcome:
    """Store a verified upstream delivery and fan it out; the caller checked the signature."""
    if event not in HANDLED_EVENTS:
        return WebhookOutcome(WebhookStatus.IGNORED, f"{event or 'unnamed'} events are not relayed")
    repository = body.get("repository")
    repo = repository.get("full_name") if isinstance(repository, dict) else None
    upstream = settings.CRCR_UPSTREAM_REPO
    if not isinstance(repo, str) or repo.lower() != upstream.lower():
        return WebhookOutcome(
            WebhookStatus.IGNORED, f"events from {repo or 'no repository'} are not relayed"
        )
    now = clock.now()
    with transaction.atomic():
        delivery, created = record_delivery(delivery_id, event, body, raw_body, now)
        if not created:
            return WebhookOutcome(
                WebhookStatus.DUPLICATE,
                f"already received as delivery {delivery.delivery_id}",
                delivery.delivery_id,
            )
        wanted, why = dispatch_decision(event, body)
        if not wanted:
            # Part 2: a ciflow/crcr/* label back-fills check runs; rerequested checks re-run.
            why = mirror.on_stored_event(delivery, event, body) or why
            return WebhookOutcome(WebhookStatus.STORED, why, delivery_id)
        dispatches = _create_dispatches(delivery, now)
        for dispatch in dispatches:
            taskqueue.enqueue("crcr.send_dispatch", dispatch.id)
        if dispatches and delivery.head_sha and github.mirror_enabled():
            # Part 2: every dispatched SHA gets its crcr/gate check (success when no L4).
            taskqueue.enqueue("crcr.sync_gate", delivery.head_sha)
    logger.info(
        "webhook fanned out",
        extra={"delivery_id": delivery_id, "event": event, "dispatches": len(dispatches)},
    )
    if not dispatches:
        return WebhookOutcome(WebhookStatus.STORED, f"{why}: no listed downstream", delivery_id)
    return WebhookOutcome(
        WebhookStatus.DISPATCHED,
        f"{why}: {len(dispatches)} dispatch(es)",
        delivery_id,
        len(dispatches),
    )


def _create_dispatches(delivery: Delivery, now: dt.datetime) -> list[Dispatch]:
    """One pending Dispatch per listed (not delisted) downstream, L1 to L4."""
    downstreams = list(Downstream.objects.filter(delisted=False).order_by("id"))
    levels = effective_levels(downstreams, now)
    rows = [
        Dispatch(
            delivery=delivery,
            downstream=downstream,
            level_at_dispatch=levels[downstream.id],
            created_at=now,
        )
        for downstream in downstreams
        if Level.L1 <= levels[downstream.id] <= Level.L4
    ]
    Dispatch.objects.bulk_create(rows)
    # bulk_create sets ids on PostgreSQL and SQLite ≥ 3.35; read them back to be sure.
    return list(Dispatch.objects.filter(delivery=delivery).order_by("id"))


# --- the dispatch body ----------------------------------------------------------------------


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


# --- sending --------------------------------------------------------------------------------


def _claim(dispatch_id: int, now: dt.datetime) -> bool:
    """Take the row for one send attempt; False if sent, given up, or another holds it."""
    pending = Dispatch.objects.filter(outcome=Dispatch.Outcome.PENDING)
    return claims.claim(pending, "dispatched_at", dispatch_id, now, attempts=F("attempts") + 1)


def _finish(dispatch_id: int, claimed_at: dt.datetime, **fields: Any) -> None:
    """Write an attempt's result, only if our claim still holds (nobody took it since)."""
    Dispatch.objects.filter(
        id=dispatch_id, outcome=Dispatch.Outcome.PENDING, dispatched_at=claimed_at
    ).update(**fields)


def send_dispatch(dispatch_id: int) -> SendOutcome:
    """Send one pending dispatch to GitHub once; record sent / not_installed / failed / retry."""
    now = clock.now()
    if not _claim(dispatch_id, now):
        return SendOutcome(SendResult.SKIPPED)
    dispatch = Dispatch.objects.select_related("delivery", "downstream").get(id=dispatch_id)
    repo = dispatch.downstream.full_name
    delivery = dispatch.delivery
    if not isinstance(delivery.payload, dict):
        _finish(dispatch_id, now, outcome=Dispatch.Outcome.FAILED, reason="payload was pruned")
        return SendOutcome(SendResult.FAILED)
    body, trimmed = client_payload(delivery)
    if trimmed:
        Dispatch.objects.filter(id=dispatch_id).update(trimmed_fields=trimmed)
    try:
        with github.dispatch_client() as client:
            client.dispatch(repo, delivery.event_type, body)
    except github.NotInstalled as error:
        _finish(dispatch_id, now, outcome=Dispatch.Outcome.NOT_INSTALLED, reason=_reason(error))
        logger.warning("dispatch: app not installed", extra=_log(dispatch, error))
        return SendOutcome(SendResult.NOT_INSTALLED)
    except github.GitHubError as error:
        return _failed_attempt(dispatch, now, error, error.retryable, error.retry_after)
    except (github.GitHubConfigError, ValueError) as error:
        return _failed_attempt(dispatch, now, error, False, None)
    _finish(dispatch_id, now, outcome=Dispatch.Outcome.SENT, dispatched_at=clock.now(), reason="")
    logger.info("dispatch sent", extra=_log(dispatch))
    return SendOutcome(SendResult.SENT)


def _failed_attempt(
    dispatch: Dispatch,
    claimed_at: dt.datetime,
    error: Exception,
    retryable: bool,
    retry_after: float | None,
) -> SendOutcome:
    attempts = dispatch.attempts
    if retryable and attempts < settings.CRCR_DISPATCH_MAX_ATTEMPTS:
        # Keep the lease: nobody retries before it runs out; the reason says what happened.
        reason = f"attempt {attempts} failed, will retry: {_reason(error)}"
        _finish(dispatch.id, claimed_at, reason=reason[:REASON_MAX_CHARS])
        logger.warning("dispatch attempt failed", extra=_log(dispatch, error))
        return SendOutcome(SendResult.RETRY, github.retry_delay(attempts, retry_after))
    reason = _reason(error)
    if retryable:
        reason = f"gave up after {attempts} attempts: {reason}"[:REASON_MAX_CHARS]
    _finish(dispatch.id, claimed_at, outcome=Dispatch.Outcome.FAILED, reason=reason)
    logger.error("dispatch failed", extra=_log(dispatch, error))
    return SendOutcome(SendResult.FAILED)


def _reason(error: Exception) -> str:
    return str(error)[:REASON_MAX_CHARS]


def _log(dispatch: Dispatch, error: Exception | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "dispatch": dispatch.id,
        "delivery_id": dispatch.delivery.delivery_id,
        "downstream": dispatch.downstream.full_name,
        "attempts": dispatch.attempts,
    }
    if error is not None:
        extra["error"] = _reason(error)
    return extra


def reconcile(limit: int = 500) -> int:
    """Re-enqueue pending dispatches older than CRCR_DISPATCH_RECONCILE_AFTER with no live lease.

    This is how lost enqueues, crashed workers and failed in-process runs converge; the claim
    in `send_dispatch` keeps a dispatch from being sent twice whatever gets enqueued.
    """

    now = clock.now()
    settled = now - dt.timedelta(seconds=settings.CRCR_DISPATCH_RECONCILE_AFTER_SECONDS)
    ids = list(
        Dispatch.objects.filter(outcome=Dispatch.Outcome.PENDING, created_at__lt=settled)
        .filter(claims.unleased("dispatched_at", now))
        .order_by("created_at", "id")
        .values_list("id", flat=True)[:limit]
    )
    for dispatch_id in ids:
        taskqueue.enqueue("crcr.send_dispatch", dispatch_id)
    return len(ids)


# --- expected results -----------------------------------------------------------------------


class ResponseState(enum.StrEnum):
    """Whether a downstream answered a dispatch (CRCR.md, "L4 blocking": no response)."""

    PENDING = "pending"  # the dispatch is not sent yet (or is being retried)
    EXPECTED = "expected"  # sent to an L2+ backend; its callbacks may still come
    ANSWERED = "answered"  # at least one callback (job row) for this delivery
    NO_RESPONSE = "no_response"  # sent to L2+, nothing within CRCR_NO_RESPONSE_AFTER
    NOT_EXPECTED = "not_expected"  # L1 at dispatch: callbacks are ignored, nothing to expect
    UNDELIVERED = "undelivered"  # failed or app not installed: the backend never heard of it


@dataclasses.dataclass(frozen=True)
class DispatchState:
    """One (delivery, downstream) pair: the dispatch and whether results came back."""

    dispatch_id: int
    delivery_id: str
    event_type: str
    pr_number: int
    head_sha: str
    downstream_id: int
    downstream: str
    level_at_dispatch: int
    outcome: str
    attempts: int
    reason: str
    trimmed_fields: list[str]
    created_at: dt.datetime
    dispatched_at: dt.datetime | None
    jobs: int
    state: ResponseState
    no_response_at: dt.datetime | None


def response_state(
    dispatch: Dispatch, jobs: int, now: dt.datetime
) -> tuple[ResponseState, dt.datetime | None]:
    """The ResponseState of a dispatch that has `jobs` job rows, and when silence counts."""
    if jobs:
        return ResponseState.ANSWERED, None
    if dispatch.outcome in (Dispatch.Outcome.FAILED, Dispatch.Outcome.NOT_INSTALLED):
        return ResponseState.UNDELIVERED, None
    if dispatch.outcome == Dispatch.Outcome.PENDING or dispatch.dispatched_at is None:
        return ResponseState.PENDING, None
    if dispatch.level_at_dispatch < Level.L2:
        return ResponseState.NOT_EXPECTED, None
    deadline = dispatch.dispatched_at + selectors.no_response_after()
    return (ResponseState.NO_RESPONSE if now >= deadline else ResponseState.EXPECTED), deadline


def dispatch_states(
    deliveries: Iterable[Delivery | str] | None = None,
    *,
    head_sha: str | None = None,
    pr_number: int | None = None,
    downstream: Downstream | None = None,
    now: dt.datetime | None = None,
) -> list[DispatchState]:
    """Per (delivery, downstream): the dispatch and its ResponseState, newest delivery first.

    Select by deliveries (rows or GUIDs), by upstream head SHA, by PR number, or by
    downstream; filters combine. Two queries whatever the number of rows.
    """
    now = now or clock.now()
    queryset = Dispatch.objects.select_related("delivery", "downstream")
    if deliveries is not None:
        guids = [d.delivery_id if isinstance(d, Delivery) else str(d) for d in deliveries]
        queryset = queryset.filter(delivery__delivery_id__in=guids)
    if head_sha is not None:
        queryset = queryset.filter(delivery__head_sha=head_sha)
    if pr_number is not None:
        queryset = queryset.filter(delivery__pr_number=pr_number)
    if downstream is not None:
        queryset = queryset.filter(downstream=downstream)
    rows = list(queryset.order_by("-delivery__received_at", "delivery_id", "downstream__full_name"))
    counts = _job_counts(rows)
    states = []
    for row in rows:
        jobs = counts.get((row.downstream_id, row.delivery.delivery_id), 0)
        state, deadline = response_state(row, jobs, now)
        states.append(
            DispatchState(
                dispatch_id=row.id,
                delivery_id=row.delivery.delivery_id,
                event_type=row.delivery.event_type,
                pr_number=row.delivery.pr_number,
                head_sha=row.delivery.head_sha,
                downstream_id=row.downstream_id,
                downstream=row.downstream.full_name,
                level_at_dispatch=row.level_at_dispatch,
                outcome=row.outcome,
                attempts=row.attempts,
                reason=row.reason,
                trimmed_fields=list(row.trimmed_fields or []),
                created_at=row.created_at,
                dispatched_at=row.dispatched_at,
                jobs=jobs,
                state=state,
                no_response_at=deadline,
            )
        )
    return states


def _job_counts(rows: list[Dispatch]) -> dict[tuple[int, str], int]:
    if not rows:
        return {}
    guids = {row.delivery.delivery_id for row in rows}
    downstream_ids = {row.downstream_id for row in rows}
    counted = (
        Job.objects.filter(delivery_id__in=guids, downstream_id__in=downstream_ids)
        .values_list("downstream_id", "delivery_id")
        .annotate(n=Count("id"))
    )
    return {(downstream_id, guid): n for downstream_id, guid, n in counted}


@dataclasses.dataclass(frozen=True)
class Liveness:
    """How a backend answered what was dispatched to it at L2+ over a window."""

    downstream_id: int
    dispatched: int  # sent at L2+ within the window
    answered: int  # of those, with at least one callback
    no_response: int  # of those, silent past CRCR_NO_RESPONSE_AFTER
    awaiting: int  # of those, silent but still within CRCR_NO_RESPONSE_AFTER

    @property
    def answer_rate(self) -> float | None:
        """answered / (answered + no_response): settled dispatches only; None if none."""
        settled = self.answered + self.no_response
        return self.answered / settled if settled else None


def liveness(
    days: int = 7, *, downstream: Downstream | None = None, now: dt.datetime | None = None
) -> dict[int, Liveness]:
    """Per downstream id: L2+ dispatches sent in the last `days`, answered vs silent."""
    now = now or clock.now()
    silent_before = now - selectors.no_response_after()
    queryset = selectors.sent_to_l2_plus(now - dt.timedelta(days=days), now)
    if downstream is not None:
        queryset = queryset.filter(downstream=downstream)
    rows = queryset.values("downstream_id").annotate(
        dispatched=Count("id"),
        answered_n=Count("id", filter=Q(answered=True)),
        no_response=Count("id", filter=Q(answered=False, dispatched_at__lte=silent_before)),
        awaiting=Count("id", filter=Q(answered=False, dispatched_at__gt=silent_before)),
    )
    return {
        row["downstream_id"]: Liveness(
            downstream_id=row["downstream_id"],
            dispatched=row["dispatched"],
            answered=row["answered_n"],
            no_response=row["no_response"],
            awaiting=row["awaiting"],
        )
        for row in rows.order_by("downstream_id")
    }


def delivery_with_states(delivery_id: str) -> tuple[Delivery, list[DispatchState]] | None:
    """A delivery and its dispatch states for the delivery page; None if unknown."""
    delivery = Delivery.objects.filter(delivery_id=delivery_id).first()
    if delivery is None:
        return None
    return delivery, dispatch_states([delivery])
