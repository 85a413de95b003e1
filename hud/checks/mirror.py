"""The mirror's entry points: what one job report, or one stored webhook, changes on GitHub.

`hud.tasks` and `hud.relay` call the mirror through this module, and every public name of
`hud.checks` is importable from here (`from hud.checks import mirror`); the rules live in the
sibling modules the package docstring lists.
"""

from __future__ import annotations

from typing import Any

from hud.checks.check_runs import (
    CHECK_NAME_PREFIX,
    backfill,
    check_run_fields,
    check_run_name,
    check_run_summary,
    external_id,
    sync_job,
)
from hud.checks.gate import (
    GATE_NAME,
    GATE_RULE,
    gate_decision,
    gate_fields,
    gate_rule,
    gate_summary,
    sync_gate,
)
from hud.checks.oncall import (
    ONCALL_MARKER,
    oncall_comment_body,
    oncall_comment_needed,
    oncall_ping_silenced,
    sync_oncall_comment,
)
from hud.checks.reconcile import reconcile
from hud.checks.reruns import request_reruns, send_rerun
from hud.checks.scope import LABEL_PREFIX, device_label, mirror_decision
from hud.checks.state import gate_state, pr_mirror_state
from hud.checks.sync import (
    MIRROR_ERRORS,
    SyncOutcome,
    SyncResult,
    _max_attempts,
    combine,
    upstream_repo,
)
from hud.checks.text import neutralise
from hud.core import taskqueue
from hud.github import mirror_enabled
from hud.models import Delivery, Job

# The package's public names, importable from here as they always were.
__all__ = [
    "CHECK_NAME_PREFIX",
    "GATE_NAME",
    "GATE_RULE",
    "LABEL_PREFIX",
    "MIRROR_ERRORS",
    "ONCALL_MARKER",
    "SyncOutcome",
    "SyncResult",
    "_max_attempts",
    "backfill",
    "check_run_fields",
    "check_run_name",
    "check_run_summary",
    "combine",
    "device_label",
    "external_id",
    "gate_decision",
    "gate_fields",
    "gate_rule",
    "gate_state",
    "gate_summary",
    "mirror_decision",
    "mirror_enabled",
    "mirror_job",
    "neutralise",
    "on_stored_event",
    "oncall_comment_body",
    "oncall_comment_needed",
    "oncall_ping_silenced",
    "pr_mirror_state",
    "reconcile",
    "request_reruns",
    "send_rerun",
    "sync_gate",
    "sync_job",
    "sync_oncall_comment",
    "upstream_repo",
]


def mirror_job(job_id: int) -> SyncOutcome:
    """Everything one job report changes on GitHub: its check run, the gate, the on-call ping."""
    job = Job.objects.select_related("downstream").filter(id=job_id).first()
    if job is None or not mirror_enabled():
        return SyncOutcome(SyncResult.NOT_WANTED, detail="nothing to mirror")
    outcomes = [sync_job(job_id)]
    if job.head_sha:
        outcomes.append(sync_gate(job.head_sha))
    if oncall_comment_needed(job):
        outcomes.append(sync_oncall_comment(job.pr_number, job.downstream_id))
    return combine(outcomes)


def on_stored_event(delivery: Delivery, event: str, body: dict[str, Any]) -> str:
    """Part 2's reaction to a stored (not dispatched) webhook; a sentence, or "" for none."""

    if not mirror_enabled():
        return ""
    action = str(body.get("action") or "")
    if event == "pull_request" and action == "labeled":
        label = body.get("label") if isinstance(body.get("label"), dict) else {}
        name = str(label.get("name") or "")
        if name.lower().startswith(LABEL_PREFIX) and delivery.head_sha:
            taskqueue.enqueue("crcr.mirror_backfill", delivery.head_sha)
            return f"label {name} recorded; check runs back-filled for {delivery.head_sha[:12]}"
        return ""
    if event in ("check_run", "check_suite") and action == "rerequested":
        return request_reruns(delivery, event, body)
    return ""
