"""How a mirrored row reaches GitHub: the outcome of a sync, the claim loop, failures, sending.

Every row that mirrors something (CheckRunMirror, GateCheck, OncallComment, RerunRequest)
stores what GitHub should show (`desired_hash`) and what it confirmed (`sent_hash`). A sync
first claims its row (`hud.models.claims`, a lease), so one worker at a time talks to GitHub
for it; a sync that finds the row claimed marks it `resync` and the holder takes one more pass
before releasing (`_run_claimed`). Creating is not idempotent on GitHub, so it is never retried
blindly: the row records that a create was attempted, creates go through a client without
in-client retries (`_single_attempt`), and a later attempt first looks the run up by name and
adopts it (`_send_check_run`, shared by per-job check runs and the gate).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db.models import F
from prometheus_client import Counter

from hud import github
from hud.core import leases
from hud.models import claims

logger = logging.getLogger(__name__)

ERROR_CHARS = 500
MAX_PASSES = 3
MIRROR_ERRORS = Counter(
    "crcr_mirror_github_errors",
    "Failed GitHub calls of the mirror (hud.checks) by kind (check_run, gate, oncall_comment, "
    "rerun) and outcome (retry, given_up), counted in the process that made the call.",
    ["kind", "outcome"],
)


class SyncResult(enum.StrEnum):
    """What one sync of a mirrored row did."""

    SENT = "sent"  # GitHub now shows the desired state (created, updated or adopted)
    UNCHANGED = "unchanged"  # GitHub already showed it: no request made
    NOT_WANTED = "not_wanted"  # nothing to mirror (level, label, unverified, disabled)
    BUSY = "busy"  # another worker holds the row; it will take one more pass
    RETRY = "retry"  # a retryable failure; the lease holds the row until `retry_in`
    FAILED = "failed"  # permanently (validation, configuration, attempts exhausted)


@dataclasses.dataclass(frozen=True)
class SyncOutcome:
    """The result of a sync, when to retry it (seconds) and why, for logs and tasks."""

    result: SyncResult
    retry_in: float | None = None
    detail: str = ""


def combine(outcomes: Iterable[SyncOutcome]) -> SyncOutcome:
    """One outcome for several syncs: a retry wins (soonest), then a failure, then the first."""
    outcomes = list(outcomes)
    retries = [o for o in outcomes if o.result == SyncResult.RETRY]
    if retries:
        return min(retries, key=lambda o: o.retry_in or 0.0)
    failed = [o for o in outcomes if o.result == SyncResult.FAILED]
    if failed:
        return failed[0]
    return outcomes[0] if outcomes else SyncOutcome(SyncResult.NOT_WANTED)


def _max_attempts() -> int:
    return int(getattr(settings, "CRCR_MIRROR_MAX_ATTEMPTS", 10))


def upstream_repo() -> str:
    """The repository check runs and comments go to (CRCR_UPSTREAM_REPO)."""
    return settings.CRCR_UPSTREAM_REPO


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _error_text(error: Exception) -> str:
    return str(error)[:ERROR_CHARS]


def _claim(model: type, row_id: int, now: dt.datetime) -> bool:
    return claims.claim(model.objects.all(), "claimed_at", row_id, now, resync=False)


def _write(model: type, row_id: int, claimed_at: dt.datetime, **fields: Any) -> bool:
    """Write a sync's result, only while our claim still holds."""
    return bool(model.objects.filter(id=row_id, claimed_at=claimed_at).update(**fields))


def _run_claimed(
    model: type, row_id: int, now: dt.datetime, step: Callable[[dt.datetime], SyncOutcome]
) -> SyncOutcome:
    """Claim the row, run `step` until nobody asked for a resync meanwhile, release it."""
    if not _claim(model, row_id, now):
        # The holder sees the flag when it releases and takes one more pass with fresh data.
        model.objects.filter(id=row_id).update(resync=True)
        return SyncOutcome(SyncResult.BUSY, detail="another worker holds this row")
    try:
        return _passes(model, row_id, now, step)
    finally:
        leases.forget(model.__name__, row_id)  # this attempt is over, whatever its outcome


def _passes(
    model: type, row_id: int, now: dt.datetime, step: Callable[[dt.datetime], SyncOutcome]
) -> SyncOutcome:
    """Run `step` on a claimed row until nobody asked for a resync meanwhile, then release it."""
    outcome = SyncOutcome(SyncResult.UNCHANGED)
    for _ in range(MAX_PASSES):
        outcome = step(now)
        if outcome.result == SyncResult.RETRY:
            return outcome  # keep the lease: nobody retries before it runs out
        released = model.objects.filter(id=row_id, claimed_at=now, resync=False).update(
            claimed_at=None
        )
        if released:
            return outcome
        model.objects.filter(id=row_id, claimed_at=now).update(resync=False)
    # Still asked for more: leave `resync` for the reconciler rather than loop here.
    model.objects.filter(id=row_id, claimed_at=now).update(claimed_at=None, resync=True)
    return outcome


# hud.ops.metrics' `kind` label of each mirrored model.
_METRIC_KINDS = {
    "CheckRunMirror": "check_run",
    "GateCheck": "gate",
    "OncallComment": "oncall_comment",
}


def _failed_attempt(
    model: type,
    row: Any,
    claimed_at: dt.datetime,
    error: Exception,
    retryable: bool,
    retry_after: float | None,
) -> SyncOutcome:
    attempts = row.attempts + 1
    given_up = not retryable
    if retryable:
        # GitHub being down or rate-limiting us (5xx, 429, secondary limits, network) is never
        # a reason to give up: the row keeps its place in the reconciler, backing off at the
        # longest step, until GitHub answers. Only a refusal (4xx) gives up.
        attempts = min(attempts, _max_attempts() - 1)
    kind = _METRIC_KINDS.get(model.__name__, model.__name__)
    MIRROR_ERRORS.labels(kind, "given_up" if given_up else "retry").inc()
    if not given_up:
        _write(model, row.id, claimed_at, attempts=attempts, last_error=_error_text(error))
        logger.warning(
            "mirror attempt failed",
            extra={"model": model.__name__, "row": row.id, "error": _error_text(error)},
        )
        return SyncOutcome(
            SyncResult.RETRY, github.retry_delay(attempts, retry_after), _error_text(error)
        )
    # Given up (or refused outright): the reconciler leaves it until the desired state changes.
    _write(model, row.id, claimed_at, attempts=_max_attempts(), last_error=_error_text(error))
    logger.error(
        "mirror failed",
        extra={"model": model.__name__, "row": row.id, "error": _error_text(error)},
    )
    return SyncOutcome(SyncResult.FAILED, detail=_error_text(error))


def _shows(run: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Whether a check run on GitHub already shows `fields` (status, conclusion, output)."""
    output = run.get("output") or {}
    wanted = fields.get("output") or {}
    return (
        run.get("status") == fields.get("status")
        and (run.get("conclusion") or None) == (fields.get("conclusion") or None)
        and output.get("title") == wanted.get("title")
        and output.get("summary") == wanted.get("summary")
    )


def _find_existing(
    client: github.GitHubApp, model: type, row: Any, fields: dict[str, Any]
) -> dict[str, Any] | None:
    """A check run an earlier, possibly timed-out create left on GitHub, owned by no other row."""
    runs = client.list_check_runs_for_ref(
        upstream_repo(), fields["head_sha"], check_name=fields["name"]
    )
    candidates = [
        run
        for run in runs
        if run.get("name") == fields["name"] and run.get("external_id") == fields["external_id"]
    ]
    if not candidates:
        return None
    owned = set(
        model.objects.filter(check_run_id__in=[run["id"] for run in candidates])
        .exclude(id=row.id)
        .values_list("check_run_id", flat=True)
    )
    free = [run for run in candidates if run["id"] not in owned]
    return max(free, key=lambda run: run["id"]) if free else None


@contextlib.contextmanager
def _single_attempt(client: github.GitHubApp) -> Iterator[None]:
    """No in-client retry for a create: a retried POST could make a second run or comment.

    The caller's lease and the lookup-before-create retry it safely instead.
    """
    attempts = client.max_attempts
    client.max_attempts = 1
    try:
        yield
    finally:
        client.max_attempts = attempts


def _sent_fields(fields: dict[str, Any], desired: str, now: dt.datetime) -> dict[str, Any]:
    return {
        "sent_hash": desired,
        "last_sent_state": {
            "status": fields.get("status"),
            "conclusion": fields.get("conclusion"),
            "title": (fields.get("output") or {}).get("title"),
        },
        "sent_at": now,
        "attempts": 0,
        "last_error": "",
    }


def _send_check_run(
    model: type, row: Any, fields: dict[str, Any], desired: str, now: dt.datetime
) -> SyncOutcome:
    """Make GitHub show `fields` on the row's check run: adopt, create once, or update."""
    repo = upstream_repo()
    try:
        with github.upstream_client() as client:
            run_id = row.check_run_id
            if run_id is None and row.create_attempted_at is not None:
                existing = _find_existing(client, model, row, fields)
                if existing is not None:
                    run_id = int(existing["id"])
                    _write(
                        model,
                        row.id,
                        now,
                        check_run_id=run_id,
                        html_url=str(existing.get("html_url") or "")[:500],
                    )
                    if _shows(existing, fields):
                        _write(model, row.id, now, **_sent_fields(fields, desired, now))
                        return SyncOutcome(SyncResult.SENT, detail="adopted")
            if run_id is None:
                _write(model, row.id, now, create_attempted_at=now)
                with _single_attempt(client):
                    run = client.create_check_run(repo, **fields)
                _write(
                    model,
                    row.id,
                    now,
                    check_run_id=int(run["id"]),
                    html_url=str(run.get("html_url") or "")[:500],
                    writes=F("writes") + 1,
                    **_sent_fields(fields, desired, now),
                )
                return SyncOutcome(SyncResult.SENT, detail="created")
            update = {key: value for key, value in fields.items() if key != "head_sha"}
            client.update_check_run(repo, run_id, **update)
            _write(
                model,
                row.id,
                now,
                writes=F("writes") + 1,
                **_sent_fields(fields, desired, now),
            )
            return SyncOutcome(SyncResult.SENT, detail="updated")
    except github.GitHubError as error:
        return _failed_attempt(model, row, now, error, error.retryable, error.retry_after)
    except (github.GitHubConfigError, ValueError, KeyError, TypeError) as error:
        return _failed_attempt(model, row, now, error, False, None)


def _want(model: type, row: Any, desired: str, now: dt.datetime, **changes: Any) -> None:
    """Record what GitHub should show for the row (its hash `desired`) and `changes`."""
    if desired != row.desired_hash:
        changes["attempts"] = 0  # a new state deserves fresh attempts
        row.attempts = 0
    _write(model, row.id, now, desired_hash=desired, **changes)


def _sync_check_run(
    model: type, row: Any, fields: dict[str, Any], now: dt.datetime, **changes: Any
) -> SyncOutcome:
    """Record what the row's check run should show; send it unless GitHub already shows it."""
    desired = _hash(fields)
    _want(model, row, desired, now, **changes)
    if row.check_run_id is not None and row.sent_hash == desired:
        return SyncOutcome(SyncResult.UNCHANGED)
    return _send_check_run(model, row, fields, desired, now)
