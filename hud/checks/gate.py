"""The `crcr/gate` merge gate: the L4 rule (`gate_decision`), its check run, and its sync.

One `crcr/gate` check per dispatched head SHA (CRCR.md, "L4 blocking"). `gate_decision` is the
same function `GET /api/v1/gate/<sha>` answers with (through `hud.checks.state.gate_state`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from typing import Any

from django.conf import settings

from hud import notifications
from hud.checks.scope import _latest_attempts
from hud.checks.sync import SyncOutcome, SyncResult, _run_claimed, _sync_check_run
from hud.checks.text import _iso, _safe_run_url, neutralise
from hud.core import clock
from hud.github import mirror_enabled
from hud.levels import effective_levels
from hud.models import Dispatch, Downstream, GateCheck, Job, Level
from hud.reads import selectors

GATE_NAME = "crcr/gate"
PASSED_CONCLUSIONS = frozenset({"success", "skipped", "neutral"})
NON_BLOCKING_CONCLUSIONS = frozenset({"cancelled", "timed_out"})

GATE_RULE = (
    "Expected: every L4 backend dispatched for this commit, each with the jobs it ran on its "
    "recent commits. A failure on the latest attempt of any expected L4 job fails the gate. "
    "Otherwise the gate waits while an expected job is running (the sweeper closes a job "
    "silent for {zombie} as timed out) or has not started within {settle} of the dispatch. "
    "Otherwise it passes; cancelled and timed-out jobs and backends with no response within "
    "{settle} do not block. A commit with no L4 backend passes."
)


def _settle() -> dt.timedelta:
    return selectors.no_response_after()


def _hours(delta_seconds: float) -> str:
    hours = delta_seconds / 3600
    return f"{hours:g} h" if hours >= 1 else f"{delta_seconds / 60:g} min"


def gate_rule() -> str:
    """The gate's rule in words, with this server's settle time and sweeper timeout."""
    return GATE_RULE.format(
        settle=_hours(_settle().total_seconds()),
        zombie=_hours(float(settings.CRCR_ZOMBIE_TIMEOUT_SECONDS)),
    )


def _expected_names(
    rows_of: dict[int, list[Dispatch]], head_sha: str, now: dt.datetime
) -> dict[int, set[tuple[str, str]]]:
    """Per backend, the (workflow, job) names it ran on its recent commits of the event types
    it was dispatched for (`rows_of`: backend id → its dispatches of this head SHA)."""
    days = int(getattr(settings, "CRCR_GATE_HISTORY_DAYS", 14))
    runs = int(getattr(settings, "CRCR_GATE_HISTORY_RUNS", 5))
    event_types = {
        backend: {row.delivery.event_type for row in rows} for backend, rows in rows_of.items()
    }
    return selectors.recent_job_names(
        event_types, head_sha, now - dt.timedelta(days=days), now, runs
    )


def _gate_jobs(rows_of: dict[int, list[Dispatch]], head_sha: str) -> dict[int, list[Job]]:
    """Per backend, its verified attempts on `head_sha` for the deliveries it was dispatched."""
    guids_of = {
        backend: {row.delivery.delivery_id for row in rows} for backend, rows in rows_of.items()
    }
    jobs: dict[int, list[Job]] = {backend: [] for backend in rows_of}
    if not rows_of:
        return jobs
    for job in Job.objects.filter(
        downstream_id__any=list(rows_of),
        head_sha=head_sha,
        delivery_id__any=sorted(set().union(*guids_of.values())),
        verified=True,
    ):
        if job.delivery_id in guids_of[job.downstream_id]:
            jobs[job.downstream_id].append(job)
    return jobs


def _item(
    downstream: Downstream,
    state: str,
    reason: str,
    *,
    job: Job | None = None,
    names: tuple[str, str] | None = None,
    settles_at: dt.datetime | None = None,
) -> dict[str, Any]:
    workflow_name, job_name = (job.workflow_name, job.job_name) if job else (names or ("", ""))
    return {
        "downstream": downstream.full_name,
        "workflow_name": workflow_name,
        "job_name": job_name,
        "state": state,
        "conclusion": (job.conclusion or None) if job else None,
        "job_id": job.id if job else None,
        "run_attempt": job.run_attempt if job else None,
        "url": _safe_run_url(downstream, job.workflow_url) if job else None,
        "reason": reason,
        "settles_at": _iso(settles_at),
    }


@dataclasses.dataclass
class _Verdict:
    """What the gate found so far, item by item, as `gate_decision` walks the L4 backends."""

    settle: dt.timedelta
    blocking: list[dict] = dataclasses.field(default_factory=list)
    pending: list[dict] = dataclasses.field(default_factory=list)
    non_blocking: list[dict] = dataclasses.field(default_factory=list)
    passed: list[dict] = dataclasses.field(default_factory=list)
    silent: list[str] = dataclasses.field(default_factory=list)
    recheck: list[dt.datetime] = dataclasses.field(default_factory=list)

    def wait(self, item: dict[str, Any], deadline: dt.datetime) -> None:
        """Pending until `deadline`, when the gate is evaluated again."""
        self.pending.append(item)
        self.recheck.append(deadline)

    def no_response(self, downstream: Downstream) -> None:
        """The whole backend stayed silent past the settle time: it does not block."""
        self.silent.append(downstream.full_name)
        self.non_blocking.append(
            _item(
                downstream,
                "no_response",
                f"no response within {_hours(self.settle.total_seconds())}",
            )
        )


def _dispatches(head_sha: str) -> list[Dispatch]:
    return list(
        Dispatch.objects.filter(delivery__head_sha=head_sha)
        .select_related("delivery", "downstream")
        .order_by("created_at", "id")
    )


def _l4_backends(dispatches: list[Dispatch], now: dt.datetime) -> list[Downstream]:
    """The backends dispatched for the SHA that are L4 now, by name."""
    backends = {d.downstream_id: d.downstream for d in dispatches}
    levels = effective_levels(backends.values(), now) if backends else {}
    return sorted(
        (backends[i] for i, level in levels.items() if level >= Level.L4),
        key=lambda d: d.full_name.lower(),
    )


def _judge_unsent(
    verdict: _Verdict, downstream: Downstream, rows: list[Dispatch], now: dt.datetime
) -> None:
    """A backend whose dispatch was never sent and which never called back."""
    waiting = [row.created_at for row in rows if row.outcome == Dispatch.Outcome.PENDING]
    if waiting:
        deadline = min(waiting) + verdict.settle
        if now < deadline:
            item = _item(downstream, "not_started", "dispatch not sent yet", settles_at=deadline)
            verdict.wait(item, deadline)
        else:
            verdict.non_blocking.append(
                _item(downstream, "undelivered", "the dispatch was not delivered")
            )
    else:
        outcomes = sorted({row.outcome for row in rows})
        verdict.non_blocking.append(
            _item(downstream, "undelivered", f"dispatch {', '.join(outcomes)}")
        )


def _judge_job(
    verdict: _Verdict,
    downstream: Downstream,
    name: tuple[str, str],
    job: Job | None,
    now: dt.datetime,
    deadline: dt.datetime,
) -> bool:
    """File one expected job under the verdict; False when it never started by the deadline."""
    if job is None:
        if now >= deadline:
            return False
        reason = "expected from recent history, not started"
        verdict.wait(
            _item(downstream, "not_started", reason, names=name, settles_at=deadline), deadline
        )
    elif job.status != Job.Status.COMPLETED:
        verdict.pending.append(_item(downstream, "running", "running", job=job))
    elif job.conclusion == Job.Conclusion.FAILURE:
        verdict.blocking.append(
            _item(downstream, "failure", "failed on its latest attempt", job=job)
        )
    elif job.conclusion in NON_BLOCKING_CONCLUSIONS:
        reason = (
            "closed by the sweeper as timed out"
            if job.closed_by_sweeper
            else f"{job.conclusion} (does not block)"
        )
        verdict.non_blocking.append(_item(downstream, job.conclusion, reason, job=job))
    else:
        verdict.passed.append(_item(downstream, job.conclusion or "success", "passed", job=job))
    return True


def _judge_backend(
    verdict: _Verdict,
    downstream: Downstream,
    rows: list[Dispatch],
    jobs: list[Job],
    expected: set[tuple[str, str]],
    now: dt.datetime,
) -> None:
    """File one L4 backend's expected jobs (or the backend as a whole) under the verdict:
    `jobs` are its attempts on the head SHA, `expected` the names of its recent history."""
    sent = [row.dispatched_at for row in rows if row.outcome == Dispatch.Outcome.SENT]
    latest = {(j.workflow_name, j.job_name): j for j in _latest_attempts(jobs)}
    if not sent and not jobs:
        _judge_unsent(verdict, downstream, rows, now)
        return
    start = min(t for t in sent if t is not None) if any(sent) else min(r.created_at for r in rows)
    deadline = start + verdict.settle
    names = set(latest) | expected
    if not names:
        # No history and no callback yet: the backend as a whole is awaited, then silent.
        if now < deadline:
            item = _item(downstream, "not_started", "no callback yet", settles_at=deadline)
            verdict.wait(item, deadline)
        else:
            verdict.no_response(downstream)
        return
    missing_after_deadline = [
        name
        for name in sorted(names)
        if not _judge_job(verdict, downstream, name, latest.get(name), now, deadline)
    ]
    if missing_after_deadline and not jobs:
        verdict.no_response(downstream)
        return
    for name in missing_after_deadline:
        verdict.non_blocking.append(
            _item(
                downstream,
                "no_response",
                f"expected from recent history; not started within "
                f"{_hours(verdict.settle.total_seconds())}",
                names=name,
            )
        )


def _headline(verdict: _Verdict, l4: list[Downstream]) -> tuple[str, str, str | None, str]:
    """(state, check-run status, conclusion, title) of a verdict."""
    if verdict.blocking:
        return "failure", "completed", "failure", f"{len(verdict.blocking)} L4 job(s) failed"
    if verdict.pending:
        return "pending", "in_progress", None, f"Waiting for {len(verdict.pending)} L4 job(s)"
    if not l4:
        title = "No L4 backend for this commit"
    elif verdict.non_blocking:
        title = f"No L4 failure ({len(verdict.non_blocking)} not blocking)"
    else:
        title = f"All {len(verdict.passed)} L4 job(s) passed"
    return "success", "completed", "success", title


def gate_decision(head_sha: str, now: dt.datetime | None = None) -> dict[str, Any]:
    """The L4 merge gate of one head SHA (CRCR.md, "L4 blocking"), as a plain dict.

    `state` is failure, pending or success; `blocking`, `pending`, `non_blocking` and
    `passed` list jobs (or whole backends, with empty job names) and why; `rule` says it in
    words. The `crcr/gate` check run and `GET /api/v1/gate/<sha>` both come from here.
    """
    now = now or clock.now()
    settle = _settle()
    dispatches = _dispatches(head_sha)
    per_backend: dict[int, list[Dispatch]] = defaultdict(list)
    for dispatch in dispatches:
        per_backend[dispatch.downstream_id].append(dispatch)
    l4 = _l4_backends(dispatches, now)
    rows_of = {downstream.id: per_backend[downstream.id] for downstream in l4}
    jobs, expected = _gate_jobs(rows_of, head_sha), _expected_names(rows_of, head_sha, now)
    verdict = _Verdict(settle)
    for downstream in l4:
        rows = rows_of[downstream.id]
        _judge_backend(verdict, downstream, rows, jobs[downstream.id], expected[downstream.id], now)
    state, status, conclusion, title = _headline(verdict, l4)
    return {
        "head_sha": head_sha,
        "check_name": GATE_NAME,
        "state": state,
        "status": status,
        "conclusion": conclusion,
        "title": title,
        "rule": gate_rule(),
        "settle_seconds": int(settle.total_seconds()),
        "dispatched": bool(dispatches),
        "l4_backends": [d.full_name for d in l4],
        "blocking": verdict.blocking,
        "pending": verdict.pending,
        "non_blocking": verdict.non_blocking,
        "passed": verdict.passed,
        "silent_backends": verdict.silent,
        "pr_numbers": sorted({d.delivery.pr_number for d in dispatches if d.delivery.pr_number}),
        "recheck_at": _iso(min(verdict.recheck)) if verdict.recheck else None,
        "evaluated_at": _iso(now),
    }


def _gate_line(item: dict[str, Any], reason: str | None = None) -> str:
    who = neutralise(item["downstream"])
    if item["job_name"]:
        who += f" · {neutralise(item['workflow_name'])} / {neutralise(item['job_name'])}"
    return f"- {who}: {neutralise(reason or item['reason'])}"


def gate_summary(decision: dict[str, Any]) -> str:
    """The gate check run's markdown summary (deterministic for one decision)."""
    if not decision["l4_backends"]:
        lines = ["No L4 backend was dispatched for this commit, so nothing here can block it."]
    else:
        lines = [f"**L4 backends:** {', '.join(neutralise(n) for n in decision['l4_backends'])}"]
    sections = (
        ("Blocking", decision["blocking"]),
        ("Waiting for", decision["pending"]),
        ("Not blocking", decision["non_blocking"]),
    )
    for heading, items in sections:
        if items:
            # Waiting items all read alike, so a job starting does not cost a gate update.
            waiting = heading == "Waiting for"
            text = "\n".join(
                _gate_line(item, "waiting for a result" if waiting else None) for item in items
            )
            lines.append(f"**{heading}:**\n{text}")
    if decision["pending"]:
        deadlines = sorted({i["settles_at"] for i in decision["pending"] if i["settles_at"]})
        if deadlines:
            lines.append(
                f"Jobs that have not started by {deadlines[-1].replace('T', ' ')} count as no "
                "response and stop blocking."
            )
    if decision["passed"]:
        lines.append(f"**Passed:** {len(decision['passed'])} L4 job(s).")
    lines.append(f"**Rule.** {decision['rule']}")
    return "\n\n".join(lines)


def gate_fields(decision: dict[str, Any]) -> dict[str, Any]:
    """The `crcr/gate` check-run body for a decision; never `neutral` for a bad outcome."""
    fields: dict[str, Any] = {
        "name": GATE_NAME,
        "head_sha": decision["head_sha"],
        "external_id": f"gate:{decision['head_sha']}",
        "status": decision["status"],
        "output": {"title": decision["title"], "summary": gate_summary(decision)},
    }
    if decision["conclusion"]:
        fields["conclusion"] = decision["conclusion"]
    public = getattr(settings, "CRCR_PUBLIC_URL", "")
    if public:
        fields["details_url"] = f"{public}/crcr/commit/{decision['head_sha']}"
    return fields


def _gate_step(gate_id: int, now: dt.datetime) -> SyncOutcome:
    gate = GateCheck.objects.get(id=gate_id)
    decision = gate_decision(gate.head_sha, now)
    notifications.notify_gate_decision(decision)  # repeated L4 failures: once per streak
    fields = gate_fields(decision)
    recheck = decision["recheck_at"]
    return _sync_check_run(
        GateCheck,
        gate,
        fields,
        now,
        state=decision["state"],
        evaluated_at=now,
        recheck_at=dt.datetime.fromisoformat(recheck.replace("Z", "+00:00")) if recheck else None,
    )


def sync_gate(head_sha: str) -> SyncOutcome:
    """Post or update the `crcr/gate` check of a dispatched head SHA."""
    if not mirror_enabled() or not head_sha:
        return SyncOutcome(SyncResult.NOT_WANTED, detail="check runs are not configured")
    if not Dispatch.objects.filter(delivery__head_sha=head_sha).exists():
        return SyncOutcome(SyncResult.NOT_WANTED, detail="nothing was dispatched for this SHA")
    now = clock.now()
    gate, _ = GateCheck.objects.get_or_create(head_sha=head_sha, defaults={"created_at": now})
    return _run_claimed(GateCheck, gate.id, now, lambda at: _gate_step(gate.id, at))
