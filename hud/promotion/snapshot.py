"""A backend's gate as its page shows it: the last evaluation, while nothing it read changed.

`evaluate_backend` judges the window's failures against every backend and prepares a month of
jobs: 0.1–0.3 s per backend (docs/performance.md), which every view of the backend page paid.
`current_gate` serves the evaluation kept in Django's cache (shared by every process in
production) when all of these hold, and otherwise evaluates it and keeps the result:

- it was computed at the backend's current revision (`hud.core.revisions`): no result, re-run
  or sweeper close was stored for this backend since, and no exclusion, override or level
  change of it was made (each bumps the revision);
- with the same gate policy and infra signatures files (an edit applies at once);
- as of at most `CRCR_GATE_SNAPSHOT_SECONDS` (default 300) before `now`, and not after it.

That last bound is all that covers what no write of this backend changes: the gate's windows
slide with time, and a result of *another* backend on one of this backend's failing SHAs may
corroborate a failure and move the gate-adjusted pass rate. Both reach the page within it; the
page says which moment its gate is as of. Everything that decides (requests, the daily
evaluation, the API with `as_of`) evaluates live.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models.signals import post_delete, post_save

from hud import attribution, gates
from hud.core import files, revisions
from hud.models import Downstream, GateExclusion, Job, LevelChange, LevelOverride
from hud.promotion.evaluation import BackendGate, evaluate_backend

_KEY = "crcr:gate-snapshot:{}"


def _config_version() -> tuple:
    """Which policy and signatures files an evaluation read, as `hud.core.files` tells them."""
    policy = gates.policy_path(getattr(settings, "CRCR_GATE_POLICY", None))
    return files.version(policy), files.version(attribution.signatures_path())


def current_gate(downstream: Downstream, now: dt.datetime) -> BackendGate:
    """`evaluate_backend(downstream, now)`, or the kept evaluation that still stands for it."""
    # Read before evaluating: a write during the evaluation changes the revision, so what
    # is kept then never passes for current.
    token = (revisions.current(downstream.id), _config_version())
    max_age = dt.timedelta(seconds=settings.CRCR_GATE_SNAPSHOT_SECONDS)
    key = _KEY.format(downstream.id)
    kept = cache.get(key)
    if kept is not None:
        kept_token, gate = kept
        as_of = gate.evaluation.as_of
        if kept_token == token and as_of <= now < as_of + max_age:
            return gate
    gate = evaluate_backend(downstream, now)
    cache.set(key, (token, gate), timeout=settings.CRCR_GATE_SNAPSHOT_SECONDS)
    return gate


def _bump_for(sender: Any, instance: Any, **kwargs: Any) -> None:
    revisions.bump(instance.id if sender is Downstream else instance.downstream_id)


def connect_signals() -> None:
    """Bump a backend's revision whenever the ORM saves or deletes a row its gate reads.

    The callback path writes jobs in plain SQL and bumps in `hud.ingestion.derived`; these
    cover everything saved through models (admins' exclusions, overrides, level changes,
    allowlist imports, jobs edited in the admin).
    """
    for model in (Downstream, Job, GateExclusion, LevelChange, LevelOverride):
        for signal in (post_save, post_delete):
            signal.connect(_bump_for, sender=model, dispatch_uid=f"gate-revision-{model.__name__}")
